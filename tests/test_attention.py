"""docnmt.attention: the kernels against the explicit softmax reference, the kernel table, spec parts,
per-model attention settings, bf16, the attention probe."""
import warnings

import pytest
import torch

from docnmt.attention import (
    KERNEL_TABLE,
    AttentionProbe,
    AttentionSettings,
    AttnSpec,
    MaskPart,
    MultiheadAttention,
    RelativeLogits,
    attention_flex,
    attention_grouped,
    attention_reference,
    attention_sdpa,
    choose_kernel,
)
from docnmt.model import ModelConfig

CFG = ModelConfig(vocab_size=50, d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0)


def rand_qkv(b=2, h=4, nq=5, nk=7, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g) for n in (nq, nk, nk)]


def tags_rows(rows):
    """Tag rows (0 = start token or pad) padded with 0 to one width."""
    width = max(map(len, rows))
    return torch.tensor([r + [0] * (width - len(r)) for r in rows])


@pytest.mark.parametrize("kind", ["none", "mask", "causal", "bias", "scale", "all"])
def test_sdpa_matches_reference(kind):
    q, k, v = rand_qkv(nq=7)
    mask = torch.zeros(2, 1, 1, 7, dtype=torch.bool)
    mask[1, ..., 5:] = True
    bias = q.sum(-1, keepdim=True).expand(-1, -1, -1, 7) * 0.1
    scale = torch.rand(2, 1, 7, 1) + 0.5
    spec = {"none": AttnSpec(), "mask": AttnSpec(mask=mask), "causal": AttnSpec(is_causal=True),
            "bias": AttnSpec(bias=bias), "scale": AttnSpec(scale=scale),
            "all": AttnSpec(mask=mask, is_causal=True, bias=bias, scale=scale)}[kind]
    torch.testing.assert_close(attention_sdpa(q, k, v, spec), attention_reference(q, k, v, spec))


@pytest.mark.parametrize("kind", ["encoder", "decoder_self", "cross", "scaled"])
def test_grouped_attention_equals_dense_masked_attention(kind):
    """AttnSpec.groups computed sentence block by sentence block equals the dense group mask,
    values and gradients, with sentences of different lengths, start tokens and padding."""
    g = torch.Generator().manual_seed(0)
    src_tags = tags_rows([[1, 1, 1, 2, 2, 3, 3, 3, 3, 3], [1, 1, 2, 2, 2, 2]])              # pads: 0
    tgt_tags = tags_rows([[0, 1, 1, 2, 2, 2, 3, 3], [0, 1, 1, 1, 2, 2, 2, 2, 2]])
    key_pad = src_tags.eq(0)[:, None, None, :]
    if kind == "encoder":
        q_tags, k_tags, spec = src_tags, src_tags, AttnSpec(mask=key_pad, groups=(src_tags, src_tags))
    elif kind == "decoder_self":
        q_tags, k_tags, spec = tgt_tags, tgt_tags, AttnSpec(is_causal=True, groups=(tgt_tags, tgt_tags))
    else:
        q_tags, k_tags, spec = tgt_tags, src_tags, AttnSpec(mask=key_pad, groups=(tgt_tags, src_tags))
    if kind == "scaled":
        spec.scale = torch.rand(2, 1, q_tags.size(1), 1, generator=g) + 0.5
    q = torch.randn(2, 4, q_tags.size(1), 8, generator=g, requires_grad=True)
    k = torch.randn(2, 4, k_tags.size(1), 8, generator=g, requires_grad=True)
    v = torch.randn(2, 4, k_tags.size(1), 8, generator=g, requires_grad=True)
    grad = torch.randn(2, 4, q_tags.size(1), 8, generator=g)
    results = []
    for fn in (attention_grouped, attention_reference):
        out = fn(q, k, v, spec)
        out.backward(grad)
        results.append([out.detach(), q.grad, k.grad, v.grad])
        q.grad = k.grad = v.grad = None
    for fast, ref in zip(*results):
        torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5)
    assert attention_sdpa(q, k, v, spec).shape == results[0][0].shape      # sdpa dispatches to it
    if spec.mask is not None:       # a key mask broadcast over the batch
        one = AttnSpec(mask=spec.mask[:1], groups=spec.groups, scale=spec.scale)
        with torch.no_grad():
            torch.testing.assert_close(attention_grouped(q, k, v, one), attention_reference(q, k, v, one),
                                       rtol=1e-5, atol=1e-5)
    # the CUDA path (FlexAttention with a block mask) has the same forward; on CPU it runs eagerly
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flex = attention_flex(q.detach(), k.detach(), v.detach(), spec)
        torch.testing.assert_close(flex, results[1][0], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_compiled_flex_attention_compiles_once_for_every_kind_and_length(monkeypatch, strict_recompiles):
    """On CUDA, FlexAttention's block masks are built compiled, one per batch shape and attention
    kind. Built as the CUDA path builds them (``compiled_flex_functions``), they must not recompile
    for every kind and length: a mask function that closed over Python constants (causality, the
    key-query length difference) used up the recompile limit within a few batches on an H200, and
    FlexAttention then materialised every score. And the path equals the reference: group, causal
    with fewer queries than keys (a cache), cross attention, untagged queries (tag 0: every real
    key), padded keys."""
    import random

    from docnmt import kernels
    strict_recompiles(5)
    from torch.nn.attention.flex_attention import flex_attention
    # the block masks compiled as on CUDA; the kernel itself eager (torch 2.13's compiled CPU
    # FlexAttention template fails to build for dynamic shapes)
    monkeypatch.setitem(kernels._FLEX_FUNCTIONS, "cpu", (flex_attention, kernels.compiled_flex_functions()[1]))
    rng, g = random.Random(0), torch.Generator().manual_seed(0)
    for step in range(6):
        n, b = rng.randint(30, 300), rng.randint(1, 3)
        for kind in ("group", "causal", "cross"):
            n_k = n + (rng.randint(1, 40) if kind != "group" else 0)
            tags = lambda length, every: (torch.arange(length) // every + 1).expand(b, length).clone()  # noqa: E731
            k_tags, mask = tags(n_k, 30), None
            if kind == "causal":
                q_tags = k_tags[:, -n:].clone()             # the last n keys' own queries
                q_tags[:, :3] = 0
            else:
                mask = torch.zeros(b, 1, 1, n_k, dtype=torch.bool)
                mask[..., int(n_k * 0.9):] = True
                k_tags = k_tags.masked_fill(mask[:, 0, 0], 0)
                q_tags = tags(n, 27 if kind == "cross" else 30).clamp(max=int(k_tags.max()))
                q_tags[:, -5:] = 0                            # untagged (padding) queries: every real key
            spec = AttnSpec(mask=mask, groups=(q_tags, k_tags), is_causal=kind == "causal")
            q = torch.randn(b, 2, n, 16, generator=g)
            k, v = (torch.randn(b, 2, n_k, 16, generator=g) for _ in range(2))
            torch.testing.assert_close(attention_flex(q, k, v, spec), attention_reference(q, k, v, spec),
                                       rtol=1e-4, atol=1e-5, msg=lambda m: f"{kind} n={n}: {m}")


def test_bf16_attention_gradients_close_to_fp32():
    """On CPU, bf16 training attention is computed in fp32 (the bf16 backward kernel is slow)."""
    q, k, v = (t.requires_grad_() for t in rand_qkv(nq=7))
    spec = AttnSpec(is_causal=True)
    out = attention_sdpa(*(t.bfloat16() for t in (q, k, v)), spec)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    attention_sdpa(q, k, v, spec).sum().backward()
    for g16, g32 in zip(grads, (q.grad, k.grad, v.grad)):
        torch.testing.assert_close(g16, g32, rtol=0.05, atol=0.05)


def test_attention_probe_context_share_is_the_weight_on_other_sentences():
    """Given the sentences of the inputs, the probe records per query the weight on keys of other
    sentences: uniform weights over 5 keys of which 2 are in the query's sentence give 3/5; a
    group-masked attention (keys of its own sentence only) gives 0; a call whose sides are unknown
    (no sentences, or a context attention) records nothing; the meter averages real queries."""
    from docnmt.attention import group_mask
    from docnmt.scoring import EntropyMeter
    torch.manual_seed(0)
    names = ("enc.0.self", "dec.0.self", "dec.0.cross", "dec.0.cross.global", "dec.0.context")
    attn = {n: MultiheadAttention(CFG.d_model, CFG.heads, name=n) for n in names}
    for m in attn.values():
        with torch.no_grad():
            m.in_proj.weight.zero_()            # all logits 0: uniform weights
    x = torch.randn(1, 5, CFG.d_model)
    src_ids, tgt_ids = torch.tensor([[0, 0, 1, 1, 1]]), torch.tensor([[0, 0, 0, 1, 1]])
    with AttentionProbe({"src": src_ids, "tgt_in": tgt_ids}) as probe:
        attn["enc.0.self"](x, x, AttnSpec())
        attn["dec.0.self"](x, x, AttnSpec(is_causal=True))
        attn["dec.0.cross"](x, x, AttnSpec(mask=group_mask(tgt_ids + 1, src_ids + 1)))
        attn["dec.0.cross.global"](x, x, AttnSpec())
        attn["dec.0.context"](x, x, AttnSpec())
    assert set(probe.context_share) == {"enc.0.self", "dec.0.self", "dec.0.cross", "dec.0.cross.global"}
    torch.testing.assert_close(probe.context_share["enc.0.self"][0], torch.tensor([[3 / 5] * 2 + [2 / 5] * 3]))
    # causal: query i sees keys 0..i; other-sentence keys among them
    torch.testing.assert_close(probe.context_share["dec.0.self"][0], torch.tensor([[0, 0, 0, 3 / 4, 3 / 5]]))
    torch.testing.assert_close(probe.context_share["dec.0.cross"][0], torch.zeros(1, 5))
    torch.testing.assert_close(probe.context_share["dec.0.cross.global"][0],
                               torch.tensor([[3 / 5] * 3 + [2 / 5] * 2]))
    meter = EntropyMeter()
    meter.add(probe, {"src": torch.tensor([[5, 6, 7, 8, 0]]), "tgt_in": torch.tensor([[5, 6, 7, 8, 9]])}, 0)
    share = meter.result("context_share")
    assert share["enc_self"] == pytest.approx((3 / 5 * 2 + 2 / 5 * 2) / 4)        # the pad query is left out
    assert share["cross"] == pytest.approx(0.0) and set(share) == {"enc_self", "dec_self", "cross", "cross_global"}
    with AttentionProbe() as blind:
        attn["enc.0.self"](x, x, AttnSpec())
    assert blind.context_share == {} and set(blind.entropy) == {"enc.0.self"}
    # a query in no sentence (G-Transformer's leading EOD, id -1) is left out of the share, and
    # the weight on that key is no one's context (a one-sentence decoder input shares nothing)
    with AttentionProbe({"src": src_ids, "tgt_in": torch.tensor([[-1, 0, 0, 1, 1]])}) as start:
        attn["dec.0.cross.global"](x, x, AttnSpec())
        attn["dec.0.self"](x, x, AttnSpec(is_causal=True))
    row = start.context_share["dec.0.cross.global"][0]
    assert row[0, 0].isnan() and row[0, 1:].tolist() == pytest.approx([3 / 5, 3 / 5, 2 / 5, 2 / 5])
    row = start.context_share["dec.0.self"][0]          # causal: query i sees keys 0..i, key 0 is EOD
    assert row[0, 0].isnan() and row[0, 1:].tolist() == pytest.approx([0, 0, 2 / 4, 2 / 5])
    with AttentionProbe({"src": src_ids, "tgt_in": torch.tensor([[-1, 0, 0, 0, 0]])}) as one:
        attn["dec.0.self"](x, x, AttnSpec(is_causal=True))
    assert one.context_share["dec.0.self"][0][0, 1:].tolist() == [0, 0, 0, 0]
    meter = EntropyMeter()
    meter.add(start, {"src": torch.tensor([[5, 6, 7, 8, 9]]), "tgt_in": torch.tensor([[5, 6, 7, 8, 9]])}, 0)
    assert meter.result("context_share")["cross_global"] == pytest.approx(0.5)


def test_attention_probe_self_distance_matches_its_definition():
    """Self-attention distance sum_j w_ij |i − j| in tokens: uniform weights over 5 keys give the
    mean gap to every position, causal uniform weights i/2; cross-attention records none; the
    meter averages it over real queries only."""
    from docnmt.scoring import EntropyMeter
    torch.manual_seed(0)
    attn = {n: MultiheadAttention(CFG.d_model, CFG.heads, name=n) for n in ("enc.0.self", "dec.0.self", "dec.0.cross")}
    for m in attn.values():
        with torch.no_grad():
            m.in_proj.weight.zero_()            # all logits 0: uniform weights
    x = torch.randn(1, 5, CFG.d_model)
    with AttentionProbe() as probe:
        attn["enc.0.self"](x, x, AttnSpec())
        attn["dec.0.self"](x, x, AttnSpec(is_causal=True))
        attn["dec.0.cross"](x, x, AttnSpec())
    gaps = torch.tensor([[sum(abs(i - j) for j in range(5)) / 5 for i in range(5)]])
    torch.testing.assert_close(probe.distance["enc.0.self"][0], gaps)
    torch.testing.assert_close(probe.distance["dec.0.self"][0], torch.arange(5.)[None] / 2)
    assert set(probe.distance) == {"enc.0.self", "dec.0.self"}
    meter = EntropyMeter()
    pad = 0
    meter.add(probe, {"src": torch.tensor([[5, 6, 7, 8, pad]]), "tgt_in": torch.tensor([[5, 6, 7, 8, 9]])}, pad)
    dist = meter.result("distance")
    assert set(dist) == {"enc_self", "dec_self"} and set(meter.result()) == {"enc_self", "dec_self", "cross"}
    assert dist["enc_self"] == pytest.approx(float(gaps[0, :4].mean()))   # the pad query is left out
    assert dist["dec_self"] == pytest.approx(1.0)


class _OnCuda(torch.Tensor):
    """A CPU tensor that says it is on CUDA: how attention_sdpa's CUDA dispatch is tested here."""

    @property
    def is_cuda(self):
        return True


def test_flex_attention_is_taken_on_cuda_unless_the_settings_switch_it_off(monkeypatch):
    """On CUDA a group mask goes to FlexAttention; ``AttentionSettings(flex=False)`` (config
    ``train.flex_attention: false``) sends it to the block-by-block SDPA path instead, with the
    same result, and attention dropout never reaches FlexAttention."""
    from docnmt import attention
    taken = []
    monkeypatch.setattr(attention, "attention_flex", lambda q, k, v, spec: taken.append("flex") or q)
    tags = tags_rows([[1] * 8 + [2] * 12, [1] * 15])       # over 16 queries: not the decoding path
    spec = AttnSpec(mask=tags.eq(0)[:, None, None, :], groups=(tags, tags))
    q, k, v = (t.as_subclass(_OnCuda) for t in rand_qkv(nq=20, nk=20))
    on, off = AttentionSettings(flex=True), AttentionSettings(flex=False)
    attention_sdpa(q, k, v, spec, settings=on)
    assert taken == ["flex"]
    attention_sdpa(q, k, v, spec, dropout=0.1, settings=on)
    out = attention_sdpa(q, k, v, spec, settings=off)
    assert taken == ["flex"]
    torch.testing.assert_close(out.as_subclass(torch.Tensor),
                               attention_reference(*(t.as_subclass(torch.Tensor) for t in (q, k, v)), spec))
    causal = torch.ones(20, 20, dtype=torch.bool).triu(1)       # DocFlat's masks come as `visible` too
    flat = AttnSpec(mask=causal, visible=lambda b, h, i, j: j <= i)
    attention_sdpa(q, k, v, flat, settings=off)
    assert taken == ["flex"]
    attention_sdpa(q, k, v, flat, settings=on)
    assert taken == ["flex", "flex"]
    attention_sdpa(*rand_qkv(nq=20, nk=20), spec, settings=on)        # a real CPU tensor never takes it
    assert taken == ["flex", "flex"]


# ---- the kernel table ---------------------------------------------------------------------------

def kernel_example(kernel):
    """A call the kernel table should send to ``kernel``: q, k, v, spec (q needing gradients
    unless the call is a decoding step)."""
    tags = tags_rows([[1] * 8 + [2] * 12, [1] * 15])
    pad = tags.eq(0)[:, None, None, :]
    q, k, v = rand_qkv(nq=20, nk=20)
    if kernel == "reference":                      # a decoding step: a few queries, no gradients
        return [*rand_qkv(nq=3, nk=7), AttnSpec(is_causal=True)]
    if kernel == "flex":                           # on CUDA, group tags and key padding
        return [*(t.as_subclass(_OnCuda) for t in (q, k, v)), AttnSpec(mask=pad, groups=(tags, tags))]
    q.requires_grad_()
    if kernel == "grouped":
        return [q, k, v, AttnSpec(mask=pad, groups=(tags, tags))]
    if kernel == "relative":
        return [q, k, v, AttnSpec(is_causal=True, bias=RelativeLogits(q, torch.randn(9, 8), 4, 20, 8 ** -0.5))]
    return [q, k, v, AttnSpec(mask=pad, is_causal=True)]


def flat_text(text: str) -> str:
    return " ".join(text.replace("`", "").split())


@pytest.mark.parametrize("route", KERNEL_TABLE, ids=lambda route: route.kernel)
def test_every_row_of_the_kernel_table_is_documented_and_dispatched(route):
    """A call each row describes goes to that row's kernel, which equals the reference; the row
    stands, in the table's order, in the module doc and in docs/attention.md."""
    from pathlib import Path

    from docnmt import attention
    q, k, v, spec = kernel_example(route.kernel)
    assert choose_kernel(spec, q, 0.0, AttentionSettings()) == route.kernel
    plain = [t.as_subclass(torch.Tensor) for t in (q, k, v)]
    want = attention_reference(*plain, spec)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = attention_flex(*plain, spec) if route.kernel == "flex" else attention_sdpa(q, k, v, spec)
    torch.testing.assert_close(got.as_subclass(torch.Tensor), want, rtol=1e-5, atol=1e-5)
    docs = Path(__file__).resolve().parents[1] / "docs" / "attention.md"
    module_doc, page = flat_text(attention.__doc__), flat_text(docs.read_text())
    rows = [(flat_text(f"{r.kernel} {r.device} {r.when}"), flat_text(f"| {r.kernel} | {r.device} | {r.when} |"))
            for r in KERNEL_TABLE]
    assert rows[KERNEL_TABLE.index(route)][0] in module_doc and rows[KERNEL_TABLE.index(route)][1] in page
    assert [module_doc.index(r[0]) for r in rows] == sorted(module_doc.index(r[0]) for r in rows)
    assert [page.index(r[1]) for r in rows] == sorted(page.index(r[1]) for r in rows)


def test_settings_and_dropout_move_a_call_down_the_table():
    """The conditions of the rows: without FlexAttention a CUDA group call goes block by block,
    with dropout too; a decoding step that needs gradients is not the explicit form."""
    q, k, v, spec = kernel_example("flex")
    assert choose_kernel(spec, q, 0.0, AttentionSettings(flex=False)) == "grouped"
    assert choose_kernel(spec, q, 0.1, AttentionSettings()) == "grouped"
    q, k, v, spec = kernel_example("reference")
    assert choose_kernel(spec, q.requires_grad_(), 0.0) == "masked"
    q, k, v, spec = kernel_example("grouped")
    spec.bias = torch.zeros(1, 1, 20, 20)
    assert choose_kernel(spec, q) == "masked"


def test_two_models_in_one_process_each_dispatch_by_their_own_settings(monkeypatch):
    """``attention_settings`` belong to a model (``docnmt serve a=… b=…``): a model whose settings
    turn FlexAttention off keeps its block-by-block path on CUDA while another model in the same
    process takes FlexAttention, in every attention module of each."""
    from docnmt import attention
    from docnmt.model import Transformer
    taken = []
    monkeypatch.setattr(attention, "attention_flex", lambda q, k, v, spec: taken.append("flex") or q)
    monkeypatch.setattr(attention, "attention_grouped",
                        lambda q, k, v, spec, dropout=0.0: taken.append("grouped") or q)
    a, b = Transformer(CFG).eval(), Transformer(CFG).eval()
    a.attention_settings, b.attention_settings = AttentionSettings(flex=True), AttentionSettings(flex=False)
    assert a.attention_settings.flex and not b.attention_settings.flex
    tags = tags_rows([[1] * 8 + [2] * 12, [1] * 15])
    spec = AttnSpec(mask=tags.eq(0)[:, None, None, :], groups=(tags, tags))
    x = torch.randn(2, 20, CFG.d_model).as_subclass(_OnCuda)
    with torch.no_grad():
        for model in (a, b, a):
            for name, mod in model.named_modules():
                if isinstance(mod, MultiheadAttention):
                    mod(x, x, spec)
    n = sum(isinstance(m, MultiheadAttention) for m in a.modules())
    assert n == CFG.encoder_layers + 2 * CFG.decoder_layers
    assert taken == ["flex"] * n + ["grouped"] * n + ["flex"] * n


class Window(MaskPart):
    """A method's own mask part: a query sees keys at most ``w`` positions away (queries aligned
    to the last keys)."""

    prefers_flex = flex_ready = True

    def __init__(self, w: int):
        self.w = torch.tensor(w)

    def dense(self, n_q, n_k, device):
        i = torch.arange(n_q, device=device)[:, None] + (n_k - n_q)
        return (i - torch.arange(n_k, device=device)[None, :]).abs() > self.w

    def mask_mod(self, B, n_q, n_k, device):
        shift, w = torch.tensor(n_k - n_q, device=device), self.w
        return lambda b, h, i, j: (i + shift - j).abs() <= w


def test_a_methods_own_mask_part_composes_with_the_core_parts_in_every_kernel():
    """A part a method adds (no new AttnSpec field) reaches the reference, the dense SDPA kernel
    and FlexAttention, together with the core's padding and causal parts; the table never sends
    it to a kernel that cannot express it (the group kernel)."""
    q, k, v = rand_qkv(nq=12, nk=12)
    pad = torch.zeros(2, 1, 1, 12, dtype=torch.bool)
    pad[1, ..., 10:] = True                     # (no query left without a visible key)
    spec = AttnSpec(mask=pad, is_causal=True, parts=[Window(3)])
    i, j = torch.arange(12)[:, None], torch.arange(12)[None, :]
    by_hand = pad | (j > i) | ((i - j) > 3)
    torch.testing.assert_close(attention_reference(q, k, v, spec), attention_reference(q, k, v, AttnSpec(mask=by_hand)))
    assert not torch.allclose(attention_reference(q, k, v, spec),
                              attention_reference(q, k, v, AttnSpec(mask=pad, is_causal=True)))
    q.requires_grad_()
    assert choose_kernel(spec, q) == "masked"
    torch.testing.assert_close(attention_sdpa(q, k, v, spec), attention_reference(q, k, v, spec))
    assert choose_kernel(spec, q.detach().as_subclass(_OnCuda).requires_grad_()) == "flex"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(attention_flex(q.detach(), k, v, spec), attention_reference(q, k, v, spec),
                                   rtol=1e-5, atol=1e-5)
    tags = torch.ones(2, 12, dtype=torch.long)
    assert choose_kernel(AttnSpec(mask=pad, groups=(tags, tags), parts=[Window(3)]), q) == "masked"


def test_spec_parts_read_back_as_the_old_fields():
    tags = torch.ones(1, 4, dtype=torch.long)
    mask = torch.zeros(1, 1, 1, 4, dtype=torch.bool)
    spec = AttnSpec(mask=mask, is_causal=True, groups=(tags, tags))
    assert spec.mask is mask and spec.is_causal and spec.groups[0] is tags and spec.visible is None
    assert AttnSpec().mask is None and not AttnSpec().is_causal and AttnSpec().groups is None
    with pytest.raises(ValueError, match="dense mask"):
        AttnSpec(visible=lambda b, h, i, j: j <= i)
    with pytest.raises(TypeError):
        spec.replace(mask=None)
    again = spec.replace(scale=torch.ones(1))
    assert again.parts == spec.parts and again.scale is not None and spec.scale is None


def test_reference_attention_leaves_out_the_keys_no_query_sees():
    """A decoding step's group attention reads only the span of keys some query sees (the
    current sentences of a long document): the same output as the softmax over every key, whose
    blocked weights are zero."""
    from docnmt.attention_spec import _visible_span, attention_weights
    torch.manual_seed(0)
    B, h, n, d = 3, 2, 40, 8
    q, k, v = torch.randn(B, h, 1, d), torch.randn(B, h, n, d), torch.randn(B, h, n, d)
    k_tags = torch.arange(n).div(10, rounding_mode="floor").expand(B, n) + 1       # four sentences of ten keys
    spec = AttnSpec(groups=(torch.tensor([[2], [3], [2]]), k_tags), mask=torch.zeros(B, 1, 1, n, dtype=torch.bool))
    want = attention_weights(q, k, spec) @ v                                        # every key
    blocked = spec.blocked(1, n, q.device)
    cut_k, _, cut_blocked = _visible_span(k, v, blocked)
    assert cut_k.size(-2) == 20 and torch.equal(cut_k, k[:, :, 10:30]) and cut_blocked.size(-1) == 20
    torch.testing.assert_close(attention_reference(q, k, v, spec), want, rtol=1e-6, atol=1e-6)
