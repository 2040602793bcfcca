#!/usr/bin/env python3
"""Read a `kpr requant` output with PyPI's `gguf` (ggml's own Python reader) and compare it with its input.

  check_gguf.py INPUT OUTPUT REPORT.json

REPORT.json is `kpr requant --json`. Checks: the same metadata keys in the same order with the same types
and values; the same tensors in the same order with the same shapes; converted tensors are Q8_0 and
dequantize (gguf.quants.dequantize) to within the reported max|w' - w| / max|w| of the input's values
(recomputed here, compared to 1e-5 relative); the others are byte for byte the input's.
Prints one JSON line {"converted": N, "kept": M, "worst": E}. Exit 77 when gguf is not importable.
"""
import json
import sys

try:
    import numpy as np
    from gguf import GGUFReader, GGMLQuantizationType
    from gguf.quants import dequantize
except ImportError as e:  # pragma: no cover
    print(f"gguf is not installed: {e}", file=sys.stderr)
    sys.exit(77)


def fields(r):
    out = []
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue
        out.append((name, [int(t) for t in f.types], [bytes(p).hex() for p in f.parts[2:]]))
    return out


def main():
    src, dst, report = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
    rep = {t["name"]: t for t in report["tensors"]}
    a, b = GGUFReader(src), GGUFReader(dst)
    fa, fb = fields(a), fields(b)
    assert [f[0] for f in fa] == [f[0] for f in fb], "metadata keys or their order differ"
    for x, y in zip(fa, fb):
        assert x == y, f"metadata key {x[0]} differs: {x[1:]} vs {y[1:]}"
    assert a.alignment == b.alignment, f"alignment {a.alignment} vs {b.alignment}"
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors], "tensor names or order differ"
    converted = kept = 0
    worst = 0.0
    for ta, tb in zip(a.tensors, b.tensors):
        assert list(ta.shape) == list(tb.shape), f"{ta.name}: shape {list(ta.shape)} vs {list(tb.shape)}"
        r = rep.get(ta.name)
        if r and r["converted"]:
            assert tb.tensor_type == GGMLQuantizationType.Q8_0, f"{ta.name}: {tb.tensor_type.name}, expected Q8_0"
            w = dequantize(ta.data, ta.tensor_type).astype(np.float64)
            w2 = dequantize(tb.data, tb.tensor_type).astype(np.float64)
            amax = np.abs(w).max()
            rel = float(np.abs(w2 - w).max() / amax) if amax > 0 else 0.0
            assert abs(rel - r["rel_error"]) <= 1e-5 * max(rel, 1e-12), f"{ta.name}: gguf says {rel}, kpr reported {r['rel_error']}"
            worst = max(worst, rel)
            converted += 1
        else:
            assert tb.tensor_type == ta.tensor_type, f"{ta.name}: type changed to {tb.tensor_type.name}"
            assert bytes(np.ascontiguousarray(ta.data).view(np.uint8)) == bytes(np.ascontiguousarray(tb.data).view(np.uint8)), \
                f"{ta.name}: bytes changed"
            kept += 1
    print(json.dumps({"converted": converted, "kept": kept, "worst": worst}))


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"check failed: {e}", file=sys.stderr)
        sys.exit(1)
