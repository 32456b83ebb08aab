"""The shapes the service writes out: the job, its envelope, records and events."""
