#!/usr/bin/env bash
# Compile the Java client (JDK 17+, nothing else) into build/ or the folder given:
#   ./build.sh && java -cp build reprompt.client.Example job.json
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/build}"
mkdir -p "$out"
find "$here/src" -name '*.java' -print0 | xargs -0 javac --release 17 -Xlint:all -Werror -d "$out"
