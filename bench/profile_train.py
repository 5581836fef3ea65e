"""Where the time of a training update goes: torch profiler over Tier M updates.

    python bench/profile_train.py [--preset transformer_small] [--kind sent|doc] [--updates 8] [--precision bf16]

Prints the top operators by self CPU time and the share of matrix multiplications, and the
achieved matmul FLOP rate (forward + backward ≈ 3 × forward FLOPs of the linear layers and
attention products).
"""
from __future__ import annotations

import argparse
import tempfile

import common


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="transformer_small")
    ap.add_argument("--kind", default="sent", choices=["sent", "doc"])
    ap.add_argument("--updates", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="fp32", help="fp32 | bf16 (autocast, also on CPU)")
    a = ap.parse_args()
    common.set_threads(a.threads)
    from torch.profiler import ProfilerActivity, profile

    from docnmt.config import Config
    from docnmt.training import Trainer
    data = common.tier_m_data()
    cfg = Config.load(a.preset).override({"data.mode": {"sent": "sent2sent", "doc": "doc2doc"}[a.kind],
                                         "train.precision": a.precision})
    with tempfile.TemporaryDirectory() as tmp:
        tr = Trainer.from_dirs(cfg, data, f"{tmp}/m", progress_bar=False)
        batches = [tr.train_set.collate(b) for b in tr.epoch_batches(1)[: a.updates + 2]]
        for b in batches[:2]:
            tr.update([b])
        with profile(activities=[ProfilerActivity.CPU]) as prof, common.Timer() as t:
            tokens = sum(tr.update([b])[2] for b in batches[2:])
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))
    m = cfg.model
    d, f, V = m.d_model, m.ffn_dim, tr.vocab.__len__()
    src = sum(int(b["src"].ne(0).sum()) for b in batches[2:])
    # linear-layer FLOPs per token (forward): encoder 4d^2 + 2df, decoder 8d^2 + 2df, output projection dV
    fwd = 2 * (src * m.encoder_layers * (4 * d * d + 2 * d * f) + tokens * m.decoder_layers * (8 * d * d + 2 * d * f)
               + tokens * d * V)
    print(f"{tokens / t.seconds:.0f} target tokens/s; linear-layer matmuls ≈ {3 * fwd / t.seconds / 1e9:.1f} GFLOP/s "
          f"(forward+backward ≈ 3× forward, attention products excluded)")


if __name__ == "__main__":
    main()
