"""What is particular to one method: errors naming a bad method or option, prefix-propagation's eq. 1.

What every method must do (parameter counts, what trains, padding invariance, save and reload) is
checked from the one table of cases, tests/support/method_cases.py, by tests/methods/test_method_cases.py.
"""

import pytest
import torch

from tests.support.helpers import padded_batch, tiny_classifier

L, D, C = 2, 32, 3  # the tiny encoder's layers and hidden size; number of labels


def test_unknown_method_and_option_are_named():
    with pytest.raises(ValueError, match="unknown method 'no-such-method'"):
        tiny_classifier("no-such-method")
    with pytest.raises(ValueError, match="prefix_len"):
        tiny_classifier("prefix-tuning", prefix_len=3)


def test_prefix_propagation_follows_eq_1(family):
    """Layer 1 reads cat(P^(1), C); layer l > 1 reads cat(P^(l) + H[:j], H[j:]) of the layer before."""
    j = 3
    model = tiny_classifier("prefix-propagation", family, prefix_length=j)
    layers = model.encoder.encoder.layer
    seen = {}
    hooks = [
        model.encoder.embeddings.register_forward_hook(lambda m, a, out: seen.update(embeddings=out)),
        layers[0].register_forward_hook(lambda m, a, out: seen.update(layer0=out)),
    ]
    for index, layer in enumerate(layers):
        hooks.append(
            layer.attention.register_forward_pre_hook(
                lambda m, args, index=index: seen.update({f"input{index}": args[0]})
            )
        )
    ids, mask = padded_batch()
    with torch.no_grad():
        model(ids, mask)
    for handle in hooks:
        handle.remove()
    P = model.method.prefix().view(j, L, D).transpose(0, 1)  # (L, j, D); eval mode: no dropout

    torch.testing.assert_close(seen["input0"][:, :j], P[0].expand(2, -1, -1))
    torch.testing.assert_close(seen["input0"][:, j:], seen["embeddings"])  # text positions unshifted
    torch.testing.assert_close(seen["input1"][:, :j], seen["layer0"][:, :j] + P[1])
    torch.testing.assert_close(seen["input1"][:, j:], seen["layer0"][:, j:])
