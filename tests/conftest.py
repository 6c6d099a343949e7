import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402

from tests.helpers import FAMILIES  # noqa: E402


@pytest.fixture(params=FAMILIES)
def family(request):
    """Every family-parametrised test runs on a tiny BERT and a tiny RoBERTa."""
    return request.param
