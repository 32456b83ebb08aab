"""The turn loop: one job's calls to the model, within its budget."""
