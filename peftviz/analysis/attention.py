"""What the Attention page computes: one document's attention, and how much of it goes to prefixes.

`document_attention` runs a trained classifier once on one document and keeps the weights the
model records: per layer, weights of shape (1, H, Tq, Tk) over [prefix keys; sequence keys] —
dense on BERT-style encoders, banded on a Longformer (`BandedAttention`, O(L · window) memory).
The first `n_prefix_queries` queries are prefix positions (prefix-propagation); text query t is
row `n_prefix_queries + t`, text key t is column `n_prefix_keys + t`.

Everything else reads rows or key sums of those weights and returns small arrays: a (layers,
heads) grid, a window of at most MAX_ROWS × MAX_COLUMNS cells, per-bucket averages along the
document. Nothing here is ever an L × L grid of the whole document, so a 2048-token document on
the long MiniLM stays cheap to show.

Weights are read as shares of their row: weight / row sum. For softmax attention (every method
but the kernel form) rows sum to 1 and this changes nothing. For kernel prefix-propagation the
rows are the mixing weights of eq. 3 and sum to 1 + α; the share is then each key's part of the
query's output.

λ(C) has one definition, `lambda_c`, which this page and the Kernel page both read (Li et al.,
ACL 2023, eq. 6): for a text query q of one layer and head, with prefix keys P and sequence keys C,

    λ(C) = Σ_{k ∈ P} exp(q·k / √d) / Σ_{k ∈ P ∪ C} exp(q·k / √d)

the share of its softmax attention that goes to the prefixes, and the weight of the prefix term in

    H = (1 − λ(C)) · Attn(q, C) + λ(C) · Attn(q, P)                       (eq. 5)

The kernel form (eq. 7) replaces λ(C) by a constant α: H = Attn(q, C) + α · Attn(q, P). Its λ(C)
is read with the same parameters run as plain prefix-propagation (α = λ(C), the α sweep's "exact"
setting), so it says how much the softmax would give the prefixes; its recorded weights give
the prefixes α / (1 + α) of every row instead (`alpha_prefix_share`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from peftviz.errors import ConfigError
from peftviz.modeling.longformer import BandedAttention, key_mass, query_rows, row_sums
from peftviz.store.runs import Run
from peftviz.training.inference import run_data

MAX_ROWS = 64  # query tokens in a token window
MAX_COLUMNS = 160  # prefix keys + key tokens in a token window
MAX_BUCKETS = 32  # buckets along the document


@dataclass
class DocumentAttention:
    """One document's recorded attention.

    tokens: the T text tokens (special tokens included).
    n_prefix_keys: j, prefix keys in front of the sequence keys (0 for fine-tuning, tiny-attention).
    n_prefix_queries: prefix positions among the queries (j for prefix-propagation, else 0).
    attentions: per layer (1, H, Tq, Tk) float32 on the CPU, dense or banded, as the model records them.
    probs: (C,) the classifier's probabilities for the document.
    lambda_c: (L, H, T) λ(C) of every text query, when the records are not softmax rows (the kernel
    form); None when they are, and λ(C) is read off them.
    """

    tokens: list[str]
    n_prefix_keys: int
    n_prefix_queries: int
    attentions: list[torch.Tensor | BandedAttention]
    probs: np.ndarray
    lambda_c: np.ndarray | None = None  # (L, H, T) from `lambda_c`; None: read from the softmax records

    @property
    def local_window(self) -> int:
        """Tokens each side a query reads on a Longformer (its one-sided window); 0 for full attention."""
        first = self.attentions[0]
        return (first.band.shape[-1] - 1) // 2 if isinstance(first, BandedAttention) else 0

    @property
    def n_layers(self) -> int:
        return len(self.attentions)

    @property
    def n_heads(self) -> int:
        return self.attentions[0].shape[1]

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def rows(self, layer: int, start: int, stop: int) -> torch.Tensor:
        """(H, stop − start, Tk): dense rows of queries start … stop − 1 (prefix positions first)."""
        return query_rows(self.attentions[layer], start, stop)[0]

    def prefix_queries(self, layer: int) -> torch.Tensor:
        """(H, j, Tk): the rows of the prefix positions in `layer` (empty without prefix positions)."""
        return self.rows(layer, 0, self.n_prefix_queries)

    @cached_property
    def query_prefix_mass(self) -> np.ndarray:
        """(L, H, T): λ(C) of each text query (eq. 6, see the module docstring); zeros without prefixes.

        Read off the recorded softmax rows, or, for the kernel form, the `lambda_c` computed with
        them. Computed once per document, in one pass over the weights.
        """
        if self.lambda_c is not None:
            return self.lambda_c
        if self.n_prefix_keys == 0:
            return np.zeros((self.n_layers, self.n_heads, self.n_tokens), dtype=np.float32)
        return np.stack(
            [
                _prefix_share(weights, self.n_prefix_keys, self.n_prefix_queries)[0].numpy()
                for weights in self.attentions
            ]
        )


def _prefix_share(weights: torch.Tensor | BandedAttention, n_prefix_keys: int, n_prefix_queries: int) -> torch.Tensor:
    """(B, H, T): each text query's weight on the prefix keys / its row sum; λ(C) for softmax rows."""
    share = key_mass(weights, n_prefix_keys) / row_sums(weights).clamp_min(1e-12)  # (B, H, Tq)
    return share[:, :, n_prefix_queries:].float().cpu()


@torch.no_grad()
def lambda_c(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> np.ndarray:
    """λ(C) of eq. 6 for every query of a batch: (L, H, B, T) float32, T the padded text length.

        λ(C) = Σ_{k ∈ P} exp(q·k / √d) / Σ_{k ∈ P ∪ C} exp(q·k / √d)

    The one definition of λ(C): the Attention and Kernel pages both call it. The model runs under
    `exact_prefix_mass`, so every layer weighs its prefix term by λ(C) (ordinary softmax attention)
    and the recorded rows are softmax rows: for the kernel form, its trained parameters run as
    plain prefix-propagation, not its α. Zeros for a model without prefix keys; padded queries are
    included (callers drop them with the attention mask).
    """
    device = next(model.parameters()).device
    model.eval()
    with model.method.exact_prefix_mass():
        out = model(input_ids.to(device), attention_mask.to(device), output_attentions=True)
    n_tokens = input_ids.shape[1]
    per_layer = []
    for weights in out.attentions:  # (B, H, q + T, j + T): q prefix queries, j prefix keys
        n_prefix_keys = weights.shape[-1] - n_tokens
        if n_prefix_keys == 0:
            per_layer.append(torch.zeros(weights.shape[0], weights.shape[1], n_tokens))
        else:
            per_layer.append(_prefix_share(weights, n_prefix_keys, out.n_prefix_queries))  # (B, H, T)
    return torch.stack(per_layer).permute(0, 2, 1, 3).numpy()  # (L, H, B, T)


def document_prefix_mass(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> np.ndarray:
    """(B,) float32: each document's λ(C) (`lambda_c`) averaged over layers, heads and its text tokens, the
    padding left out: how much of its attention the document gives the prefixes."""
    per_token = lambda_c(model, input_ids, attention_mask).mean(axis=(0, 1))  # (B, T)
    mask = attention_mask.cpu().numpy().astype(np.float32)  # (B, T)
    return ((per_token * mask).sum(1) / np.maximum(mask.sum(1), 1)).astype(np.float32)


def alpha_prefix_share(model) -> np.ndarray | None:
    """(L,) α / (1 + α): the share of every query's output the kernel form gives the prefixes.

    None for methods without α, whose prefix share is λ(C) itself.
    """
    alpha = getattr(model.method, "alpha", None)
    if alpha is None or type(model.method).trained_alpha(model.method.config) is None:
        return None
    alpha = alpha.detach().float().cpu().numpy()
    return alpha / (1 + alpha)


# each on short lines: they stand side by side in two columns half a 1280-pixel page wide
LAMBDA_EQUATION = (
    r"\begin{aligned} \lambda(C) &= \frac{\sum_{k \in P} e^{q \cdot k/\sqrt{d}}}{\sum_{k \in P \cup C} e^{q \cdot k/\sqrt{d}}} \\ "
    r"H &= (1 - \lambda(C))\,\mathrm{Attn}(q, C) \\ &\quad + \lambda(C)\,\mathrm{Attn}(q, P) \end{aligned}"
)
ALPHA_EQUATION = (
    r"\begin{aligned} H &= \mathrm{Attn}(q, C) + \alpha\,\mathrm{Attn}(q, P) \\ "
    r"\text{prefix share} &= \frac{\alpha}{1 + \alpha} \end{aligned}"
)


@dataclass
class Explanation:
    """One quantity explained for a reader: a title, its equation (LaTeX) and two plain sentences."""

    title: str
    equation: str
    text: str


def lambda_and_alpha(alpha: float | None = None) -> tuple[Explanation, Explanation]:
    """What a kernel run's λ(C) means and what α means, side by side on the Attention and Kernel pages.

    `alpha`: the run's α, to give its prefix share in numbers (None: left general).
    """
    lam = Explanation(
        "λ(C), a kernel run's softmax share (eq. 6)",
        LAMBDA_EQUATION,
        "λ(C) is the share of a token's attention that ordinary softmax attention gives the prefixes; it "
        "changes from token to token. For a kernel run it is computed from the run's own trained prefixes as "
        "if the method had no kernel form (ordinary softmax attention), so it shows how much the prefixes would get without α.",
    )
    share = "" if alpha is None else f" (this run: α = {alpha:g}, a share of {alpha / (1 + alpha):.2%})"
    fixed = Explanation(
        "α, the kernel form's fixed weight (eq. 7)",
        ALPHA_EQUATION,
        "α is the constant weight the kernel form puts on the prefix term instead of λ(C), the same for every "
        f"token. The sequence term keeps weight 1, so the prefixes get α / (1 + α) of each token's output{share}.",
    )
    return lam, fixed


def kernel_explanation(run: Run) -> tuple[Explanation, Explanation] | None:
    """λ(C) and α side by side for a kernel run (its α in numbers when it stayed fixed); None for other runs."""
    options = run.method_config
    alpha = run.method_class.trained_alpha(options)
    if alpha is None:
        return None
    return lambda_and_alpha(None if run.method_class.alpha_trains(options) else alpha)


def _shares(rows: torch.Tensor) -> torch.Tensor:
    """(..., Tk) weights -> the same divided by their row sum (a no-op for softmax rows)."""
    return rows / rows.sum(-1, keepdim=True).clamp_min(1e-12)


def prefix_labels(n_prefix: int) -> list[str]:
    return [f"P{i + 1}" for i in range(n_prefix)]


# ---------------------------------------------------------------------------------------------
# one document


def validation_split(run: Run) -> tuple[list[str], list[int]]:
    """(texts, labels) of the run's validation split: the same data, seed and limit it trained on."""
    validation = run_data(run).splits["validation"]
    return list(validation["text"]), list(validation["label"])


def validation_documents(run: Run) -> list[str]:
    """The run's validation texts, in the order its stored predictions use."""
    return validation_split(run)[0]


def document_attention(model, tokenizer, text: str, max_length: int) -> DocumentAttention:
    """Run `model` on `text` (truncated to `max_length` tokens) once and keep its attention.

    The kernel form records α-mixed rows, so its λ(C) comes from a second pass, `lambda_c`.
    """
    batch = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]  # (1, T)
    device = next(model.parameters()).device
    with torch.inference_mode():
        out = model(ids.to(device), mask.to(device), output_attentions=True)
    attentions = [_first_item(layer) for layer in out.attentions]  # per layer (1, H, Tq, Tk)
    n_queries, n_keys = attentions[0].shape[-2:]
    n_tokens = ids.shape[1]
    mixes_by_alpha = alpha_prefix_share(model) is not None
    return DocumentAttention(
        tokens=tokenizer.convert_ids_to_tokens(ids[0].tolist()),
        n_prefix_keys=n_keys - n_tokens,  # prefix-tuning: j + T keys; prefix-propagation: j + T
        n_prefix_queries=n_queries - n_tokens,  # prefix-propagation: j + T queries; else T
        attentions=attentions,
        probs=out.logits[0].float().softmax(-1).cpu().numpy(),
        lambda_c=lambda_c(model, ids, mask)[:, :, 0] if mixes_by_alpha else None,  # (L, H, T)
    )


def _first_item(weights: torch.Tensor | BandedAttention) -> torch.Tensor | BandedAttention:
    """The first batch item (kept as a batch of one), float32 on the CPU."""
    if isinstance(weights, BandedAttention):
        return weights.select(0)
    return weights[:1].float().cpu()


# ---------------------------------------------------------------------------------------------
# prefix mass λ(C)


def prefix_mass_grid(doc: DocumentAttention) -> np.ndarray:
    """(layers, heads): the mean over the text queries of the mass each puts on the prefix keys.

    This is λ(C) (prefix-propagation paper, eq. 6; `lambda_c`) averaged over the document's tokens,
    the same λ(C) as the Kernel page's, kernel runs included. All zeros for runs without prefix keys.
    """
    return doc.query_prefix_mass.mean(-1)


def bucket_size(n_tokens: int, requested: int = 0, max_buckets: int = MAX_BUCKETS) -> int:
    """Tokens per bucket: `requested` (or 4), raised so there are at most `max_buckets` buckets."""
    return max(requested or 4, math.ceil(n_tokens / max_buckets), 1)


@dataclass
class MassProfile:
    """Prefix mass along the document, averaged over heads and over the queries of each bucket."""

    starts: np.ndarray  # (n_buckets,) first token position of each bucket
    size: int  # tokens per bucket (the last one may be shorter)
    mass: np.ndarray  # (layers, n_buckets)


def prefix_mass_profile(doc: DocumentAttention, bucket: int = 0) -> MassProfile:
    """Prefix mass per query position, averaged over heads, in buckets of `bucket` tokens (0: automatic).

    Costs one pass over the model's own weights; the result is (layers, ≤ MAX_BUCKETS) numbers.
    """
    size = bucket_size(doc.n_tokens, bucket)
    starts = np.arange(0, doc.n_tokens, size)
    counts = np.diff(np.append(starts, doc.n_tokens))
    mass = doc.query_prefix_mass.mean(1)  # (L, T): mean over heads
    return MassProfile(starts, size, np.add.reduceat(mass, starts, axis=1) / counts)


# ---------------------------------------------------------------------------------------------
# a window of tokens


def window_keys(doc: DocumentAttention, start: int, rows: int, context: int) -> tuple[int, int, int, int]:
    """Clip a window to the document and the cell bounds: (start, rows, first key, end key)."""
    start = min(max(start, 0), doc.n_tokens - 1)
    rows = min(max(rows, 1), MAX_ROWS, doc.n_tokens - start)
    j = doc.n_prefix_keys
    context = max(0, min(context, (MAX_COLUMNS - j - rows) // 2))
    lo = max(0, start - context)
    hi = min(doc.n_tokens, start + rows + context, lo + max(MAX_COLUMNS - j, rows))
    return start, rows, lo, hi


def token_window(
    doc: DocumentAttention, layer: int, head: int, start: int, rows: int, context: int
) -> tuple[np.ndarray, list[str], list[str]]:
    """One head's weights for query tokens start..start+rows over the prefix keys and nearby keys.

    Columns: the j prefix keys (labelled P1..Pj), then the key tokens in
    [start - context, start + rows + context). The window is clipped to the document and to at
    most MAX_ROWS × MAX_COLUMNS cells (context shrinks first). Weights are shares of their full row.
    Returns (matrix (rows, j + keys), row labels, column labels).
    """
    start, rows, lo, hi = window_keys(doc, start, rows, context)
    j = doc.n_prefix_keys
    q0 = doc.n_prefix_queries + start
    full_rows = doc.rows(layer, q0, q0 + rows)[head]  # (rows, Tk)
    shares = _shares(full_rows)
    matrix = torch.cat([shares[:, :j], shares[:, j + lo : j + hi]], dim=1)  # (rows, j + hi - lo)
    return matrix.numpy(), doc.tokens[start : start + rows], prefix_labels(j) + doc.tokens[lo:hi]


# ---------------------------------------------------------------------------------------------
# what the prefix positions read (prefix-propagation)


@dataclass
class PrefixRows:
    """What each prefix position of one layer and head attends to.

    prefix_mass: (j,) share on the prefix keys. to_prefixes: (j, j) share on each prefix key.
    to_buckets: (j, n_buckets) share on the text tokens of each bucket (summed over the bucket).
    top_tokens: per prefix position, the top-k text tokens as (position, token, share).
    """

    labels: list[str]
    prefix_mass: np.ndarray
    to_prefixes: np.ndarray
    to_buckets: np.ndarray
    bucket_labels: list[str]
    top_tokens: list[list[tuple[int, str, float]]]


def bucket_labels(n_tokens: int, size: int) -> list[str]:
    return [f"{s}–{min(s + size, n_tokens) - 1}" for s in range(0, n_tokens, size)]


def prefix_rows(doc: DocumentAttention, layer: int, head: int, top_k: int = 5, bucket: int = 0) -> PrefixRows:
    """What the prefix positions attend to in one layer and head (prefix-propagation only).

    Raises ValueError for a run whose prefixes are not positions (no prefix queries).
    """
    if doc.n_prefix_queries == 0:
        raise ConfigError(
            "this run has no prefix positions: only prefixes that are positions of their own have queries"
        )
    j = doc.n_prefix_keys
    shares = _shares(doc.prefix_queries(layer)[head])  # (j, Tk)
    text = shares[:, j:]  # (j, T)
    size = bucket_size(doc.n_tokens, bucket)
    starts = np.arange(0, doc.n_tokens, size)
    to_buckets = np.add.reduceat(text.numpy(), starts, axis=1)  # (j, n_buckets)
    weights, positions = text.topk(min(top_k, doc.n_tokens), dim=-1)  # (j, k)
    top = [
        [(int(p), doc.tokens[p], float(w)) for w, p in zip(row_w, row_p)]
        for row_w, row_p in zip(weights.tolist(), positions.tolist())
    ]
    return PrefixRows(
        labels=prefix_labels(j),
        prefix_mass=shares[:, :j].sum(-1).numpy(),
        to_prefixes=shares[:, :j].numpy(),
        to_buckets=to_buckets,
        bucket_labels=bucket_labels(doc.n_tokens, size),
        top_tokens=top,
    )


def top_tokens_table(rows: PrefixRows) -> list[dict]:
    """One row per prefix position: its mass on the prefixes and its top text tokens, for a table."""
    return [
        {
            "prefix": label,
            "on prefixes": round(float(mass), 3),
            "top tokens": ", ".join(f"{token} @{pos} ({weight:.2f})" for pos, token, weight in top),
        }
        for label, mass, top in zip(rows.labels, rows.prefix_mass, rows.top_tokens)
    ]
