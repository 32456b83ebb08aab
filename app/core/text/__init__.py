"""Text as the checks match it: folded, searched approximately, read as numbers."""
