"""``python -m reprompt_sim`` (and ``reprompt sim``): run the flaky-model simulator.

::

    python -m reprompt_sim --port 8099 --seed 7 --fail broken_json=0.2,wrong_type=0.2 --fix 0.8
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from app.loopback import uvicorn_server
from reprompt_sim.config import ANSWER_MODES, SimConfig, parse_rates
from reprompt_sim.server import create_app


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reprompt sim",
        description=(
            "A flaky LLM behind OpenAI (/v1/chat/completions) and Anthropic (/v1/messages) "
            "endpoints. It answers structured-output requests, breaks its answers at seeded "
            "rates, and fixes them when the feedback names the problem. A prompt can script "
            "it exactly with a [[sim {...}]] directive (see docs/simulator.md)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="interface to listen on")
    add("--port", type=int, default=8099, help="port to listen on")
    add("--seed", type=int, default=0, help="seed for every random choice")
    add(
        "--fail",
        type=_rates,
        default=None,
        metavar="MODE=RATE,...",
        help=f"probability that a first answer has each defect; modes: {', '.join(ANSWER_MODES)}",
    )
    add("--fix", type=float, default=0.8, help="chance to fix a defect the feedback names")
    add("--blind-fix", type=float, default=0.1, help="chance to fix a defect the feedback misses")
    add("--rate-limit", type=float, default=0.0, help="chance of a 429 per request")
    add("--retry-after", type=float, default=1.0, help="seconds in Retry-After (may be fractional)")
    add("--server-error", type=float, default=0.0, help="chance of a 500 or 503/529 per request")
    add("--latency-ms", type=float, default=0.0, help="base latency of every response")
    add("--jitter-ms", type=float, default=0.0, help="extra seeded latency, up to this much")
    add("--slow", type=float, default=0.0, help="chance that a request is slow")
    add("--slow-ms", type=float, default=2000.0, help="extra latency of a slow request")
    add(
        "--verbose-tokens",
        type=int,
        default=400,
        help="length of the preamble written in 'truncation' mode",
    )
    add(
        "--cache-keyless",
        action="store_true",
        help="cache OpenAI prompts sent without a prompt_cache_key too (as OpenAI does)",
    )
    add(
        "--token-delay-ms",
        type=float,
        default=0.0,
        help='time between two tokens of a streamed answer ("stream": true)',
    )
    add("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until interrupted. ``--help`` and bad flags exit like argparse does."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = SimConfig(
            seed=args.seed,
            failure_rates=args.fail or {},
            fix_probability=args.fix,
            blind_fix_probability=args.blind_fix,
            rate_limit_rate=args.rate_limit,
            retry_after_s=args.retry_after,
            server_error_rate=args.server_error,
            latency_ms=args.latency_ms,
            jitter_ms=args.jitter_ms,
            slow_rate=args.slow,
            slow_ms=args.slow_ms,
            verbose_tokens=args.verbose_tokens,
            cache_keyless=args.cache_keyless,
            token_delay_ms=args.token_delay_ms,
        )
    except ValueError as exc:
        parser.error(str(exc))
    rates = ", ".join(f"{m}={r:g}" for m, r in config.failure_rates.items()) or "none"
    print(
        f"reprompt sim on http://{args.host}:{args.port} (seed {config.seed}; failures: {rates})",
        file=sys.stderr,
    )
    server = uvicorn_server(
        create_app(config), host=args.host, port=args.port, log_level=args.log_level
    )
    # uvicorn re-raises the Ctrl-C it handled, after shutting down cleanly.
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    return 0


def _rates(text: str) -> dict[str, float]:
    try:
        return parse_rates(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


if __name__ == "__main__":
    sys.exit(main())
