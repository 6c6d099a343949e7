"""A shared server's model check reads the whole name (issue 33): the long MiniLM's names are
`long-minilm` and `long-minilm-w<N>`, nothing that merely begins like one (`long-minilm-w64/../../x`
is a path on the server). The refusal is the same sentence whatever was typed."""

import pytest

from peftviz.app.policy import ServerPolicy
from peftviz.errors import ModelLoadError

STORE_MODELS = ["/owner/models/mine"]
REFUSED = (
    "this server is shared: the model must be one of minilm, tiny-bert, tiny-roberta, tiny-longformer, "
    "/owner/models/mine; server paths and hub ids are not loaded"
)


@pytest.mark.parametrize("name", ["long-minilm", "long-minilm-w64", "long-minilm-w128", "tiny-bert", *STORE_MODELS])
def test_a_shared_server_takes_built_in_and_stored_model_names(name):
    ServerPolicy(shared=True).check_model(name, STORE_MODELS)  # no error


@pytest.mark.parametrize(
    "name",
    [
        "long-minilm-w64/../../x",
        "long-minilm/../../etc/passwd",
        "long-minilmx",
        "long-minilm-w64x",
        "long-minilm-w",
        "tiny-bert/../x",
        "/owner/models/mine/../theirs",
    ],
)
def test_a_shared_server_refuses_a_name_that_only_begins_like_an_allowed_one(name):
    with pytest.raises(ModelLoadError) as refused:
        ServerPolicy(shared=True).check_model(name, STORE_MODELS)
    assert str(refused.value) == REFUSED
