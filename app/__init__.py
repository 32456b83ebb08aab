"""reprompt: retry-guarded LLM generation as an HTTP service."""

__version__ = "0.1.0"
