"""The OpenAI-compatible front door: ``POST /v1/chat/completions`` (docs/openai-compatible.md).

A request with a ``json_schema`` or ``json_object`` response format (with tools or
without) becomes a job whose answer is validated and re-asked; the model's tool calls go
back to the caller. Without one it is a plain call of the model.
"""
