"""When the text moves: how a stored run's calibration holds on corrupted and other-domain test sets.

    corruptions.py   seeded corrupted copies of a test split: four families × severities 1 … 5 (nlpaug)
    shifts.py        a shift (a family at a severity, or another dataset with the same labels) as test data
    evaluate.py      a run's model on a shift: its test probabilities, cached in the run folder, resumable
    table.py         per unit and shift, the metrics with their seed intervals; families' spread; Δs
    attention.py     the prefix methods' attention mass on the prefix, per document, as severity rises

Ovadia et al. (NeurIPS 2019) drew calibration against shift intensity per method; this package does it for
every stored PEFT method, offline. The constants here are light (no torch), so `report --help` reads them.
"""

FAMILIES = ("typo", "keyboard", "ocr", "word-deletion")
SEVERITIES = (0, 1, 2, 3, 4, 5)
SHARES = (0.05, 0.10, 0.20, 0.35, 0.50)  # share of a document's words corrupted at severity 1 … 5
DOMAIN = "domain"  # the family name of a shift to another dataset; its severity is None
