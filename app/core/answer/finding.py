"""What a validator says about an answer: ``(ok, diagnosis)``, spec 002's black box.

    def total_matches(value) -> Finding:
        ok = sum(line["amount"] for line in value["lines"]) == value["total"]
        return ok, None if ok else "total must equal the sum of the lines"

Not the answer's ``Verdict`` (``app.core.answer.verdict``): a finding is one check's word;
the verdict is what the whole answer means for the job.
"""

Finding = tuple[bool, str | None]
