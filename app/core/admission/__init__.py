"""Admission: what a job must satisfy to be queued, checked in one call at submit."""
