#!/usr/bin/env bash
# Compile the Java client (JDK 17+, nothing else) into build/ or the folder given; with
# "test" after it, the unit checks too:
#   ./build.sh && java -cp build reprompt.client.Example job.json
#   ./build.sh build test && java -cp build reprompt.client.ClientTest
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/build}"
dirs=("$here/src")
if [[ "${2:-}" == "test" ]]; then dirs+=("$here/test"); fi
mkdir -p "$out"
find "${dirs[@]}" -name '*.java' -print0 | xargs -0 javac --release 17 -Xlint:all -Werror -d "$out"
