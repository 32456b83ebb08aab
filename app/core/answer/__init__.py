"""A model's answer, from its raw text to the verdict on it."""
