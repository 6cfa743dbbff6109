"""Statistics over records, pure functions of them: medians and intervals (``stats``), comparisons (``compare``),
the CI gate (``gate``) and its calibration (``calibration``), A/B across commits (``ab``), other tools' JSON
(``interop``)."""
