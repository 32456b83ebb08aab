"""The OpenAI-compatible front door: ``POST /v1/chat/completions`` (docs/openai-compatible.md).

A request with a ``json_schema`` or ``json_object`` response format (or tools) becomes a
job whose answer is validated and re-asked; without one it is a plain call of the model.
"""
