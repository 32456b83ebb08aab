"""What crosses the wire: the spec a client sends, the job, envelope, records, events it reads."""
