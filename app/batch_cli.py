"""``reprompt batch``: a running service's batches from the command line (#30).

    reprompt batch submit items.jsonl --template template.json   # a progress bar, then
    reprompt batch results b_1234 > out.jsonl                    # one line per item
    reprompt batch get b_1234 | reprompt batch cancel b_1234

``items.jsonl`` holds one ``{customId, input, override?}`` per line; its first line may be
the batch's options (``{"template": …, "reask": …}``) instead of ``--template``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Final

from app.client import ApiClient

BAR: Final = 30


def add(commands: Any, default_url: str) -> None:
    """The ``batch`` command and its subcommands."""
    batch = commands.add_parser("batch", help="submit a batch, follow it, read its results")
    sub = batch.add_subparsers(dest="batch_command", metavar="SUBCOMMAND", required=True)
    submit = sub.add_parser("submit", help="submit a JSONL file of items, with a progress bar")
    submit.add_argument("file", help="one item per line (or - for stdin)")
    submit.add_argument("--template", help="the job template as JSON (else the first line)")
    submit.add_argument("--reask", choices=("auto", "batch", "live"), default=None)
    submit.add_argument("--idempotency-key", default=None)
    submit.add_argument("--no-wait", action="store_true", help="print the batch id and return")
    results = sub.add_parser("results", help="every item's result as JSONL on stdout")
    results.add_argument("id")
    get = sub.add_parser("get", help="show a batch")
    get.add_argument("id")
    cancel = sub.add_parser("cancel", help="cancel a batch")
    cancel.add_argument("id")
    for cmd in (submit, results, get, cancel):
        cmd.add_argument(
            "--url", default=os.environ.get("REPROMPT_URL", default_url), help="the service"
        )
        cmd.add_argument("--key", default=os.environ.get("REPROMPT_API_KEY"), help="bearer API key")


def run(ns: argparse.Namespace) -> int:
    with ApiClient(ns.url, key=ns.key) as api:
        if ns.batch_command == "submit":
            return _submit(api, ns)
        if ns.batch_command == "results":
            for line in api.batch_results(ns.id):
                sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
            return 0
        if ns.batch_command == "get":
            print(json.dumps(api.get_batch(ns.id), indent=2))
            return 0
        print(json.dumps(api.cancel_batch(ns.id), indent=2))
        return 0


def _submit(api: ApiClient, ns: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        source: IO[str] = (
            sys.stdin
            if ns.file == "-"
            else stack.enter_context(Path(ns.file).open(encoding="utf-8"))
        )
        lines = _lines(source)
        first = next(lines, None)
        if first is None:
            print("reprompt: the file has no items", file=sys.stderr)
            return 2
        if "template" in first:
            options, items = first, lines
        elif ns.template is None:
            print("reprompt: give --template, or the options as the first line", file=sys.stderr)
            return 2
        else:
            template = json.loads(Path(ns.template).read_text(encoding="utf-8"))
            options, items = {"template": template}, _chain(first, lines)
        if ns.reask:
            options["reask"] = ns.reask
        batch = api.submit_batch(options, items, idempotency_key=ns.idempotency_key)
    print(f"submitted {batch['id']} ({batch['total']} items)", file=sys.stderr)
    if ns.no_wait:
        print(batch["id"])
        return 0
    for event in api.batch_events(batch["id"]):
        if event.name == "progress":
            batch = event.data
            _bar(batch, sys.stderr)
    sys.stderr.write("\n")
    print(json.dumps(batch, indent=2))
    return 0 if batch["status"] == "completed" else 1


def _lines(source: IO[str]) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(source, 1):
        if line.strip():
            value = json.loads(line)
            if not isinstance(value, dict):
                raise ValueError(f"line {number} is not a JSON object")
            yield value


def _chain(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield first
    yield from rest


def _bar(batch: dict[str, Any], out: IO[str]) -> None:
    """``[#####.....] 120/200  ok 100  failed 20  round 2  $0.0123``, redrawn in place."""
    counts, total = batch["counts"], max(batch["total"], 1)
    done = counts["succeeded"] + counts["failed"]
    filled = BAR * done // total
    out.write(
        f"\r[{'#' * filled}{'.' * (BAR - filled)}] {done}/{batch['total']}"
        f"  ok {counts['succeeded']}  failed {counts['failed']}"
        f"  round {batch['round']}  ${batch['costUsd']:.4f}  {batch['status']}"
    )
    out.flush()
