"""JSON Schema as the service checks answers against it."""
