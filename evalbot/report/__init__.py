"""Where the texts and the receipt are made: one jinja2 environment (render) over templates/, the
scorecard and check-run text (scorecard), the signed in-toto receipt (receipt)."""
