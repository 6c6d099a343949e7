"""The Attention page: its analysis on tiny models, its figures' data, and the page on the smoke store."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from peftviz import build_classifier, load_encoder
from peftviz.analysis import attention as analysis
from peftviz.figures import attention as figures
from peftviz.modeling.longformer import BandedAttention
from peftviz.store.runs import list_runs
from peftviz.training.inference import load_trained
from tests.support.build_counts import count_calls, private_store
from tests.support.helpers import charts, give_params_a_wrong_shape, plotly_array

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages/3_Attention.py")
J = 4  # prefix length of the unit-test models
SENTENCE = "the quick brown fox jumps over the lazy dog while markets in london closed higher on friday"
WORDS = SENTENCE.split()
LONG_TEXT = " ".join(WORDS[i % len(WORDS)] for i in range(400))  # 400+ tokens


@pytest.fixture(scope="module")
def tiny_models():
    """method -> (model, tokenizer): tiny random 2-layer, 4-head BERTs with MiniLM's tokenizer."""
    models = {}
    for method, options in [
        ("prefix-propagation", {"prefix_length": J}),
        ("prefix-tuning", {"prefix_length": J}),
        ("kernel-prefix-propagation", {"prefix_length": J, "alpha": 0.5}),
        ("fine-tuning", {}),
    ]:
        encoder, tokenizer = load_encoder("tiny-bert")
        torch.manual_seed(1)
        models[method] = (build_classifier(encoder, method, 3, options).eval(), tokenizer)
    return models


@pytest.fixture(scope="module", params=["tiny-bert", "tiny-longformer"])
def long_doc(request, tiny_models):
    """A 400+-token document under prefix-propagation: dense records (BERT) and banded (Longformer)."""
    if request.param == "tiny-bert":
        model, tokenizer = tiny_models["prefix-propagation"]
    else:
        encoder, tokenizer = load_encoder("tiny-longformer")
        torch.manual_seed(1)
        model = build_classifier(encoder, "prefix-propagation", 3, {"prefix_length": J}).eval()
    return analysis.document_attention(model, tokenizer, LONG_TEXT, 512)


def dense(weights) -> torch.Tensor:
    """(1, H, Tq, Tk) dense weights of a dense or banded record (fine for tiny test documents)."""
    return weights.to_dense() if isinstance(weights, BandedAttention) else weights


def recorded(model, tokenizer, text, max_length):
    """The model's own recorded attention, per layer (H, Tq, Tk), without the analysis module."""
    batch = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        out = model(batch["input_ids"], batch["attention_mask"], output_attentions=True)
    return [a[0] for a in out.attentions]


# ---------------------------------------------------------------------------------------------
# analysis


def test_document_shapes_for_each_method(tiny_models):
    expected = {  # method -> (prefix keys, prefix queries)
        "prefix-propagation": (J, J),
        "kernel-prefix-propagation": (J, J),
        "prefix-tuning": (J, 0),
        "fine-tuning": (0, 0),
    }
    for method, (keys, queries) in expected.items():
        model, tokenizer = tiny_models[method]
        doc = analysis.document_attention(model, tokenizer, "a short document about markets", 32)
        T = doc.n_tokens
        assert (doc.n_prefix_keys, doc.n_prefix_queries) == (keys, queries), method
        assert doc.tokens[0] == "[CLS]" and doc.tokens[-1] == "[SEP]"
        assert (doc.n_layers, doc.n_heads) == (2, 4)
        assert all(a.shape == (1, 4, queries + T, keys + T) and a.dtype == torch.float32 for a in doc.attentions)
        assert doc.probs.shape == (3,) and np.isclose(doc.probs.sum(), 1, atol=1e-5)


def test_grid_is_the_prefix_mass_of_the_recorded_attention(tiny_models):
    model, tokenizer = tiny_models["prefix-propagation"]
    direct = np.stack(
        [a[:, J:, :J].sum(-1).mean(-1).numpy() for a in recorded(model, tokenizer, LONG_TEXT, 512)]
    )  # (L, H): mean over text queries of their mass on the prefix keys
    grid = analysis.prefix_mass_grid(analysis.document_attention(model, tokenizer, LONG_TEXT, 512))
    assert grid.shape == (2, 4)
    np.testing.assert_allclose(grid, direct, atol=1e-6)
    assert 0 < grid.min() and grid.max() < 1


def test_grid_for_prefix_tuning_and_fine_tuning(tiny_models):
    text = "shares in the bank rose after the results"
    model, tokenizer = tiny_models["prefix-tuning"]
    direct = np.stack([a[:, :, :J].sum(-1).mean(-1).numpy() for a in recorded(model, tokenizer, text, 32)])
    doc = analysis.document_attention(model, tokenizer, text, 32)
    np.testing.assert_allclose(analysis.prefix_mass_grid(doc), direct, atol=1e-6)
    model, tokenizer = tiny_models["fine-tuning"]
    doc = analysis.document_attention(model, tokenizer, text, 32)
    assert np.array_equal(analysis.prefix_mass_grid(doc), np.zeros((2, 4)))


def test_kernel_grid_is_lambda_not_the_share_of_the_mixing_weights(tiny_models):
    model, tokenizer = tiny_models["kernel-prefix-propagation"]
    text = "the film won three awards at the festival"
    layers = recorded(model, tokenizer, text, 32)
    text_rows = [a[:, J:] for a in layers]  # (H, T, j + T)
    assert torch.allclose(text_rows[0].sum(-1), torch.tensor(1.5), atol=1e-5)  # rows sum to 1 + α
    mixing_share = np.stack([(r[..., :J].sum(-1) / r.sum(-1)).mean(-1).numpy() for r in text_rows])
    np.testing.assert_allclose(mixing_share, 0.5 / 1.5, atol=1e-6)  # α / (1 + α): the same for every query
    doc = analysis.document_attention(model, tokenizer, text, 32)
    grid = analysis.prefix_mass_grid(doc)
    batch = tokenizer(text, truncation=True, max_length=32, return_tensors="pt")
    lam = analysis.lambda_c(model, batch["input_ids"], batch["attention_mask"])  # (L, H, 1, T)
    np.testing.assert_allclose(grid, lam[:, :, 0].mean(-1), atol=1e-6)  # λ(C), as on the Kernel page
    assert np.abs(grid - 0.5 / 1.5).max() > 1e-2 and doc.query_prefix_mass.std() > 1e-3  # varies by query
    assert model.method.alpha_override is None  # the exact-λ(C) pass is undone
    np.testing.assert_allclose(analysis.alpha_prefix_share(model), [0.5 / 1.5] * 2, atol=1e-6)
    assert analysis.alpha_prefix_share(tiny_models["prefix-propagation"][0]) is None


def test_lambda_and_alpha_are_explained_side_by_side():
    lam, alpha = analysis.lambda_and_alpha(0.005)
    assert r"\lambda(C) &= \frac{\sum_{k \in P}" in lam.equation and r"\alpha\,\mathrm{Attn}(q, P)" in alpha.equation
    for explained in (lam, alpha):
        assert explained.text.count(". ") == 1 and explained.text.endswith(".")  # two plain sentences
    assert "(this run: α = 0.005, a share of 0.50%)" in alpha.text
    assert "as if the method had no kernel form (ordinary softmax attention)" in lam.text
    assert "(this run" not in analysis.lambda_and_alpha(None)[1].text


def test_token_window_of_a_long_document(long_doc):
    T = long_doc.n_tokens
    assert 300 < T <= 512
    matrix, row_labels, col_labels = analysis.token_window(long_doc, 1, 2, start=200, rows=40, context=20)
    assert matrix.shape == (40, J + 80)
    assert row_labels == long_doc.tokens[200:240]
    assert col_labels == ["P1", "P2", "P3", "P4"] + long_doc.tokens[180:260]
    full = dense(long_doc.attentions[1])[0, 2]  # (j + T, j + T)
    rows = full[J + 200 : J + 240]
    np.testing.assert_allclose(matrix[:, :J], rows[:, :J].numpy(), atol=1e-7)
    np.testing.assert_allclose(matrix[:, J:], rows[:, J + 180 : J + 260].numpy(), atol=1e-7)


def test_token_window_stays_bounded(long_doc):
    T = long_doc.n_tokens
    matrix, row_labels, col_labels = analysis.token_window(long_doc, 0, 0, start=100, rows=500, context=1000)
    assert matrix.shape[0] == len(row_labels) == analysis.MAX_ROWS
    assert matrix.shape[1] == len(col_labels) <= analysis.MAX_COLUMNS
    matrix, row_labels, col_labels = analysis.token_window(long_doc, 0, 0, start=T - 3, rows=10, context=5)
    assert row_labels == long_doc.tokens[T - 3 :]
    assert col_labels[J:] == long_doc.tokens[T - 8 :]
    assert matrix.shape == (3, J + 8)


def test_prefix_rows(long_doc, tiny_models):
    rows = analysis.prefix_rows(long_doc, 1, 3, top_k=5)
    assert rows.labels == ["P1", "P2", "P3", "P4"]
    assert rows.to_prefixes.shape == (J, J)
    assert rows.to_buckets.shape == (J, len(rows.bucket_labels)) and len(rows.bucket_labels) <= analysis.MAX_BUCKETS
    np.testing.assert_allclose(rows.to_prefixes.sum(1) + rows.to_buckets.sum(1), 1, atol=1e-5)
    np.testing.assert_allclose(rows.prefix_mass, rows.to_prefixes.sum(1), atol=1e-6)
    full = dense(long_doc.attentions[1])[0, 3]  # (j + T, j + T)
    for p, top in enumerate(rows.top_tokens):
        weights = [w for _, _, w in top]
        assert len(top) == 5 and weights == sorted(weights, reverse=True)
        for pos, token, weight in top:
            assert token == long_doc.tokens[pos]
            assert weight == pytest.approx(float(full[p, J + pos]), abs=1e-6)
    assert [r["prefix"] for r in analysis.top_tokens_table(rows)] == rows.labels
    model, tokenizer = tiny_models["prefix-tuning"]
    with pytest.raises(ValueError, match="no prefix positions"):
        analysis.prefix_rows(analysis.document_attention(model, tokenizer, "a text", 32), 0, 0)


def test_prefix_mass_profile(long_doc):
    profile = analysis.prefix_mass_profile(long_doc)
    n_buckets = len(profile.starts)
    assert n_buckets <= analysis.MAX_BUCKETS and profile.mass.shape == (2, n_buckets)
    assert profile.starts[-1] < long_doc.n_tokens <= profile.starts[-1] + profile.size
    one_bucket = analysis.prefix_mass_profile(long_doc, bucket=long_doc.n_tokens)
    np.testing.assert_allclose(one_bucket.mass[:, 0], analysis.prefix_mass_grid(long_doc).mean(1), atol=1e-6)


def test_a_2048_token_document_is_reduced_before_drawing():
    T, j = 2048, 4
    torch.manual_seed(0)
    weights = torch.rand(1, 1, j + T, j + T).softmax(-1)  # (1, H, j + T, j + T), one head
    doc = analysis.DocumentAttention([f"w{i}" for i in range(T)], j, j, [weights], np.ones(2) / 2)
    assert analysis.prefix_mass_grid(doc).shape == (1, 1)
    assert analysis.prefix_mass_profile(doc).mass.shape == (1, analysis.MAX_BUCKETS)
    matrix, _, _ = analysis.token_window(doc, 0, 0, 1500, 64, 200)
    assert matrix.shape[0] <= analysis.MAX_ROWS and matrix.shape[1] <= analysis.MAX_COLUMNS
    assert analysis.prefix_rows(doc, 0, 0).to_buckets.shape == (j, analysis.MAX_BUCKETS)


# ---------------------------------------------------------------------------------------------
# figures


def test_grid_figure(long_doc):
    grid = analysis.prefix_mass_grid(long_doc)
    trace = figures.prefix_mass_grid_figure(grid).data[0]
    np.testing.assert_array_equal(trace.z, grid)
    assert (trace.zmin, trace.zmax) == (0, grid.max())  # fitted to the data, and said so
    assert f"0–{grid.max():.3f}" in trace.colorbar.title.text
    assert list(trace.x) == ["H1", "H2", "H3", "H4"] and list(trace.y) == ["L1", "L2"]
    assert trace.texttemplate == "%{z:.3f}"  # 4 heads: the numbers fit their cells
    assert "%{z:.4f}" in trace.hovertemplate


@pytest.mark.parametrize(
    "shape, width, shown",
    [
        ((6, 12), figures.GRID_WIDTH_PX, ""),  # MiniLM in half the page: 20 px cells, "0.137" needs 25 with room
        ((6, 12), 800, "%{z:.3f}"),  # the same grid twice as wide
        ((6, 12), 480, "%{z:.2f}"),  # wide enough for "0.14", not for "0.137"
        ((2, 4), figures.GRID_WIDTH_PX, "%{z:.3f}"),  # tiny-bert's 2 × 4
    ],
)
def test_the_grid_prints_its_numbers_only_where_they_fit(shape, width, shown):
    """MiniLM's 6 × 12 grid printed "0.1370.0620.1110.072…" (the browser audit's "text" check, on the planted
    page, sees it drawn); the hover gives every value however the cells are drawn."""
    from peftviz.figures import cell_text

    grid = np.random.default_rng(0).uniform(0.01, 0.2, size=shape)
    trace = figures.prefix_mass_grid_figure(grid, width_px=width).data[0]
    assert trace.texttemplate == shown and "λ = %{z:.4f}" in trace.hovertemplate
    cell_px = (width - cell_text.LEFT_PX - cell_text.COLORBAR_PX) / shape[1]
    widest = max(cell_text.text_px(format(value, ".3f"), figures.CELL_FONT_PX) for value in grid.ravel())
    assert (widest + cell_text.PAD_PX <= cell_px) == (shown == "%{z:.3f}")


def test_the_tour_refits_a_grids_numbers_to_the_projectors_type():
    """At 18 px a 4 × 4 grid's numbers still fit the Tour's 640-px figure; a 6 × 12 grid's do not."""
    from peftviz.figures.tour import presentable

    small = presentable(figures.prefix_mass_grid_figure(np.full((4, 4), 0.1234))).data[0]
    large = presentable(figures.prefix_mass_grid_figure(np.full((6, 12), 0.1234), width_px=2000)).data[0]
    assert (small.texttemplate, small.textfont.size) == ("%{z:.3f}", 18) and large.texttemplate == ""


def test_token_heatmap_figure(long_doc):
    matrix, row_labels, col_labels = analysis.token_window(long_doc, 0, 1, 50, 16, 8)
    fig = figures.token_heatmap_figure(matrix, row_labels, col_labels, J)
    np.testing.assert_array_equal(fig.data[0].z, matrix)
    assert list(fig.layout.xaxis.ticktext) == col_labels and list(fig.layout.yaxis.ticktext) == row_labels
    assert list(fig.layout.xaxis.tickvals) == list(range(len(col_labels)))  # repeated tokens stay apart
    assert fig.data[0].customdata[0][0] == f"{row_labels[0]} → P1"
    with pytest.raises(ValueError, match="too many"):
        figures.token_heatmap_figure(np.zeros((65, 10)), ["t"] * 65, ["k"] * 10)


def test_prefix_rows_and_profile_figures(long_doc):
    rows = analysis.prefix_rows(long_doc, 0, 0)
    fig = figures.prefix_rows_figure(rows, layer=0, head=0)
    assert fig.layout.title.text.startswith("Layer 1, head 1: ")
    np.testing.assert_array_equal(fig.data[0].z, np.concatenate([rows.to_prefixes, rows.to_buckets], axis=1))
    assert list(fig.layout.xaxis.ticktext) == rows.labels + rows.bucket_labels
    assert list(fig.layout.yaxis.ticktext) == rows.labels
    profile = analysis.prefix_mass_profile(long_doc)
    fig = figures.prefix_mass_profile_figure(profile)
    assert len(fig.data) == 2
    for trace, mass in zip(fig.data, profile.mass):
        np.testing.assert_array_equal(trace.y, mass)
        np.testing.assert_array_equal(trace.x, profile.starts)


# ---------------------------------------------------------------------------------------------
# the page


def select_run(at, label: str) -> None:
    box = at.selectbox(key="attention_run")
    box.select_index(next(i for i, option in enumerate(box.options) if option.startswith(f"{label} ·"))).run()


def widget(elements, label: str):
    return next(e for e in elements if e.label.startswith(label))


def assert_clean(at) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def test_page_on_a_prefix_propagation_run(app_store):
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert_clean(at)
    select_run(at, "prefix-propagation")
    assert_clean(at)
    shown = charts(at)
    assert set(shown) == {"grid", "profile", "tokens", "prefix_rows"}  # λ(C) grid and profile, tokens, prefix rows
    assert not any("α is the constant weight" in m.value for m in at.markdown)  # α is explained for kernel runs
    grid_before = plotly_array(shown["grid"]["data"][0]["z"])
    tokens_before = plotly_array(shown["tokens"]["data"][0]["z"])
    assert grid_before.shape == (2, 4)

    widget(at.selectbox, "Layer").select_index(1)
    widget(at.selectbox, "Head").select_index(2)
    widget(at.selectbox, "Validation document").select_index(4)
    at.run()
    assert_clean(at)
    shown = charts(at)
    grid = plotly_array(shown["grid"]["data"][0]["z"])
    heatmap = shown["tokens"]
    tokens = plotly_array(heatmap["data"][0]["z"])
    assert grid.shape == (2, 4) and not np.allclose(grid, grid_before)
    assert not np.array_equal(tokens, tokens_before)
    assert heatmap["layout"]["title"]["text"].startswith("Layer 2, head 3")

    run = next(r for r in list_runs(app_store) if r.label == "prefix-propagation")
    j = run_prefix_length(run)
    model, tokenizer = load_trained(run)
    doc = analysis.document_attention(model, tokenizer, analysis.validation_documents(run)[4], run.config.max_length)
    np.testing.assert_allclose(grid, analysis.prefix_mass_grid(doc), atol=1e-6)
    matrix, row_labels, col_labels = analysis.token_window(doc, 1, 2, 0, 32, 32)
    np.testing.assert_allclose(tokens, matrix, atol=1e-6)
    assert tokens.shape == (min(32, doc.n_tokens), j + doc.n_tokens)
    assert heatmap["layout"]["xaxis"]["ticktext"] == col_labels
    assert heatmap["layout"]["yaxis"]["ticktext"] == row_labels
    assert col_labels[:j] == [f"P{i + 1}" for i in range(j)]
    prefix_z = plotly_array(shown["prefix_rows"]["data"][0]["z"])
    assert prefix_z.shape[0] == j
    assert len(at.dataframe) == 1


def run_prefix_length(run) -> int:
    return run.method_config.prefix_length


def test_page_window_slider_moves_the_window(app_store):
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    select_run(at, "kernel-prefix-propagation")
    widget(at.slider, "Window start").set_value(10)
    widget(at.slider, "Rows").set_value(5)
    at.run()
    assert_clean(at)
    heatmap = charts(at)["tokens"]
    assert plotly_array(heatmap["data"][0]["z"]).shape[0] == 5
    assert "tokens 10–14" in heatmap["layout"]["title"]["text"]
    assert any("1 + α" in c.value for c in at.caption)
    run = at.selectbox(key="attention_run").value
    lam, alpha = analysis.kernel_explanation(run)  # λ(C) and α side by side, with their equations
    assert [m.value for m in at.markdown if m.value in (lam.text, alpha.text)] == [lam.text, alpha.text]
    assert f"α = {run.method_config.alpha:g}" in alpha.text
    shown = [element.value for element in [*at.markdown, *at.latex]]  # st.latex wraps its body in $$ … $$
    assert all(any(equation in value for value in shown) for equation in (lam.equation, alpha.equation))


@pytest.mark.parametrize("label", ["fine-tuning", "tiny-attention 1H"])
def test_page_without_prefixes_says_so_and_draws_the_tokens(app_store, label):
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    select_run(at, label)
    assert_clean(at)
    assert any("no prefix keys" in i.value for i in at.info)
    shown = charts(at)
    assert list(shown) == ["tokens"]
    assert "P1" not in shown["tokens"]["layout"]["xaxis"]["ticktext"]


def test_page_on_an_empty_store(empty_store):
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception
    assert at.info and not charts(at)


def test_page_on_a_run_with_broken_params(smoke_store, tmp_path, monkeypatch):
    source = next(r for r in list_runs(smoke_store) if r.label == "prefix-propagation")
    broken = tmp_path / "runs" / source.name
    shutil.copytree(source.path, broken)
    give_params_a_wrong_shape(broken)  # lists (its header is whole), fails when the model is rebuilt
    monkeypatch.setenv("PEFTVIZ_RUNS", str(tmp_path / "runs"))
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception
    assert len(at.error) == 1 and "params.safetensors" in at.error[0].value
    assert not charts(at)


@pytest.fixture(scope="module")
def longformer_store(tmp_path_factory):
    """One prefix-propagation run on a tiny Longformer with 600-token documents."""
    from peftviz.run_config import preset_config
    from peftviz.training.trainer import train

    store = tmp_path_factory.mktemp("longformer_store")
    config = preset_config("smoke", "prefix-propagation", model="tiny-longformer", max_length=600, limit=24, epochs=1)
    train(config, store)
    return store


WINDOW_4 = 4  # the tiny Longformer's one-sided window


def test_page_on_a_longformer_run_draws_banded_attention(longformer_store, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_RUNS", str(longformer_store))
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert_clean(at)
    run = list_runs(longformer_store)[0]
    model, tokenizer = load_trained(run)
    texts = analysis.validation_documents(run)
    lengths = [len(tokenizer(t, truncation=True, max_length=600)["input_ids"]) for t in texts]
    longest = int(np.argmax(lengths))
    assert lengths[longest] == 600  # a document cut at max_length: longer than BERT-style windows
    widget(at.selectbox, "Validation document").select_index(longest).run()
    widget(at.slider, "Window start").set_value(300).run()  # the slider's range follows the document
    assert_clean(at)
    assert any(c.value.startswith("600 tokens") for c in at.caption)
    assert any(f"the {WINDOW_4} tokens on either side" in c.value for c in at.caption)
    doc = analysis.document_attention(model, tokenizer, texts[longest], 600)
    assert isinstance(doc.attentions[0], BandedAttention)
    shown = charts(at)
    np.testing.assert_allclose(
        plotly_array(shown["tokens"]["data"][0]["z"]), analysis.token_window(doc, 0, 0, 300, 32, 32)[0], atol=1e-6
    )
    window = model.encoder.config.attention_window[0] // 2
    matrix = analysis.token_window(doc, 0, 0, 300, 32, 32)[0][:, run_prefix_length(run) :]  # keys 268 … 363
    far = np.abs(np.arange(300, 332)[:, None] - np.arange(268, 364)[None, :]) > window
    assert (matrix[far] == 0).all() and (matrix[~far] > 0).any()  # local attention stays in the window


def test_page_on_your_own_text(app_store):
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    select_run(at, "prefix-propagation")
    at.radio[0].set_value("your own text").run()
    assert_clean(at)
    assert any("Paste a text" in i.value for i in at.info) and not charts(at)
    at.text_area[0].input("   ").run()
    assert any("Paste a text" in i.value for i in at.info)
    at.text_area[0].input("shares in the bank rose after the results " * 3).run()
    assert_clean(at)
    assert any("gold: unknown" in c.value for c in at.caption)
    assert "tokens" in charts(at)


def test_page_picker_tells_the_seeds_of_a_group_apart(app_seeds_store):
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert_clean(at)
    options = at.selectbox(key="attention_run").options
    assert len(set(options)) == len(options) == 12  # six groups of two seeds
    propagation = [option for option in options if option.startswith("prefix-propagation · ")]
    assert [option.split(" · ")[1] for option in propagation] == ["seed 0", "seed 1"]
    box = at.selectbox(key="attention_run")
    box.select_index(options.index(propagation[1])).run()
    assert_clean(at)
    run = at.selectbox(key="attention_run").value
    assert run.label == "prefix-propagation" and run.seed == 1
    grids = {}
    for member in (r for r in list_runs(app_seeds_store) if r.label == "prefix-propagation"):
        model, tokenizer = load_trained(member)
        text, max_length = analysis.validation_documents(member)[0], member.config.max_length
        grids[member.seed] = analysis.prefix_mass_grid(analysis.document_attention(model, tokenizer, text, max_length))
    shown = plotly_array(charts(at)["grid"]["data"][0]["z"])
    np.testing.assert_allclose(shown, grids[1], atol=1e-6)  # the seed-1 run's attention, not seed 0's
    assert not np.allclose(grids[0], grids[1], atol=1e-4)


def test_a_second_reader_draws_the_first_readers_figures_without_building_them(smoke_store, tmp_path, monkeypatch):
    """appkit.shared: another session on the same run and document builds nothing; a layer and head
    of its own builds the two figures that show one head, not the λ(C) grid and profile."""
    private_store(smoke_store, tmp_path, monkeypatch)
    built = count_calls(
        monkeypatch,
        figures,
        "prefix_mass_grid_figure",
        "prefix_mass_profile_figure",
        "token_heatmap_figure",
        "prefix_rows_figure",
    )
    first = AppTest.from_file(PAGE, default_timeout=60).run()
    select_run(first, "prefix-propagation")
    assert_clean(first)
    once = dict(built)
    assert once["prefix_rows_figure"] >= 1 and all(count <= 2 for count in once.values())  # the default run, then this

    second = AppTest.from_file(PAGE, default_timeout=60).run()
    select_run(second, "prefix-propagation")
    assert_clean(second)
    assert built == once  # nothing built again
    assert charts(second) == charts(first)

    widget(second.selectbox, "Layer").select_index(1).run()
    assert_clean(second)
    assert built == {
        **once,
        "token_heatmap_figure": once["token_heatmap_figure"] + 1,
        "prefix_rows_figure": once["prefix_rows_figure"] + 1,
    }


def test_the_page_opens_on_the_newest_run_with_prefix_keys(app_mixed_store):
    """Issue 32: it opened on the store's oldest prefix run (a tiny-bert smoke run beside newer MiniLM ones)."""
    at = AppTest.from_file(PAGE, default_timeout=120).run()
    assert_clean(at)
    usable = [run for run in list_runs(app_mixed_store) if run.status != "corrupt" and run.metrics]
    with_prefix = [run for run in usable if run.method_class.prefix_keys]
    newest = max(with_prefix, key=lambda run: run.created)
    assert newest.created > min(run.created for run in with_prefix)  # the store has an older one to open on
    assert at.selectbox(key="attention_run").value.path == newest.path
