"""The flaky-model simulator (``reprompt sim``): OpenAI and Anthropic endpoints over a
seeded model that breaks its JSON answers and fixes them when the feedback is precise.

::

    from reprompt_sim.server import SimConfig, serve_in_background

    with serve_in_background(SimConfig(seed=1, failure_rates={"broken_json": 0.3})) as url:
        ...  # POST f"{url}/v1/chat/completions" or f"{url}/v1/messages"

A sibling of the product package: it imports from ``app`` (``app.loopback``), never the
reverse. See docs/simulator.md for the failure modes and the ``[[sim {...}]]`` directive.
"""
