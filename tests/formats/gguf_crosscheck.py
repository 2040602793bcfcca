#!/usr/bin/env python3
"""Cross-check kpr's GGUF reader/writer and dequantizers with PyPI's `gguf` (ggml's own Python package).

Driven by tests/formats/test_gguf_python.cpp:
  gguf_crosscheck.py dump FILE           JSON of what gguf.GGUFReader sees in FILE (metadata, tensors)
  gguf_crosscheck.py write FILE          write a GGUF with gguf.GGUFWriter: every metadata type, a few tensors
  gguf_crosscheck.py dequant FILE DIR    dequantize every tensor of FILE with gguf.quants into DIR/<name>.npy
  gguf_crosscheck.py types               JSON of gguf's GGML type table: id -> [name, block, bytes]
  gguf_crosscheck.py npy FILE            JSON of what numpy.load sees in FILE: dtype, fortran order, shape, values
Exit 77 when `gguf` cannot be imported (the caller skips).
"""
import json
import sys
import zlib

try:
    import numpy as np
    import gguf
    from gguf import GGUFReader, GGUFValueType, GGUFWriter, GGMLQuantizationType
except ImportError as e:  # pragma: no cover
    print(f"gguf is not installed: {e}", file=sys.stderr)
    sys.exit(77)


def leaves(field):
    """The leaf values of a field, flattened (gguf's reader flattens nested arrays)."""
    main = field.types[0]
    if main == GGUFValueType.ARRAY:
        sub = field.types[-1]
        if sub == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        return [v for i in field.data for v in field.parts[i].tolist()]
    if main == GGUFValueType.STRING:
        return [bytes(field.parts[-1]).decode("utf-8")]
    return [field.parts[-1].tolist()[0]]


def dump(path):
    r = GGUFReader(path)
    fields = []
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue
        fields.append({"key": name, "types": [int(t) for t in f.types], "leaves": leaves(f)})
    tensors = []
    for t in r.tensors:
        raw = np.ascontiguousarray(t.data).view(np.uint8).tobytes()
        tensors.append({
            "name": t.name,
            "type": int(t.tensor_type),
            "ne": [int(d) for d in t.shape],
            "data_offset": int(t.data_offset),
            "n_bytes": int(t.n_bytes),
            "crc32": zlib.crc32(raw) & 0xFFFFFFFF,
        })
    out = {"alignment": int(r.alignment), "data_offset": int(r.data_offset), "fields": fields, "tensors": tensors}
    json.dump(out, sys.stdout)


def write(path):
    w = GGUFWriter(path, arch="pycheck")
    w.add_uint8("p.u8", 200)
    w.add_int8("p.i8", -100)
    w.add_uint16("p.u16", 60000)
    w.add_int16("p.i16", -30000)
    w.add_uint32("p.u32", 3000000000)
    w.add_int32("p.i32", -2000000000)
    w.add_float32("p.f32", 1.5)
    w.add_uint64("p.u64", 2**63 + 5)
    w.add_int64("p.i64", -(2**62))
    w.add_float64("p.f64", 0.1)
    w.add_bool("p.bool", True)
    w.add_string("p.str", "gr\u00fc\u00df dich")
    w.add_array("p.arr_str", ["a", "bb", ""])
    w.add_key_value("p.arr_u8", [1, 2, 3], GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT8)
    w.add_key_value("p.arr_f32", [0.5, -2.0], GGUFValueType.ARRAY, sub_type=GGUFValueType.FLOAT32)
    w.add_array("p.arr_nested", [[1, 2], [3]])
    rng = np.random.default_rng(5)
    w.add_tensor("t.f32", rng.standard_normal((3, 8)).astype(np.float32))
    w.add_tensor("t.f16", rng.standard_normal((2, 16)).astype(np.float16))
    q8 = rng.integers(0, 256, size=(4, 2 * 34), dtype=np.uint8)  # 4 rows of 64 q8_0 weights
    q8[:, 0::34] = 0
    q8[:, 1::34] = 0x20  # a small positive f16 scale in every block
    w.add_tensor("t.q8_0", q8, raw_dtype=GGMLQuantizationType.Q8_0)
    q4k = rng.integers(0, 256, size=(2, 3, 144), dtype=np.uint8)  # 2 experts x 3 rows x 256
    q4k[..., 0:4] = 0x10
    w.add_tensor("t.q4_K", q4k, raw_dtype=GGMLQuantizationType.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dequant(path, outdir):
    r = GGUFReader(path)
    for t in r.tensors:
        try:
            x = gguf.quants.dequantize(np.ascontiguousarray(t.data), GGMLQuantizationType(int(t.tensor_type)))
        except NotImplementedError:
            continue
        np.save(f"{outdir}/{t.name}.npy", np.ascontiguousarray(x, dtype=np.float32).reshape(-1))


def types():
    out = {}
    for t in GGMLQuantizationType:
        bs = gguf.GGML_QUANT_SIZES.get(t)
        if bs is not None:
            out[str(int(t))] = [t.name.lower(), int(bs[0]), int(bs[1])]
    json.dump(out, sys.stdout)


def npy(path):
    a = np.load(path, allow_pickle=False)
    out = {"dtype": a.dtype.str, "fortran": bool(a.flags.f_contiguous and not a.flags.c_contiguous),
           "shape": list(a.shape), "values": [float(v) for v in a.reshape(-1)]}
    json.dump(out, sys.stdout)


def main(argv):
    if len(argv) >= 3 and argv[1] == "dump":
        dump(argv[2])
    elif len(argv) >= 3 and argv[1] == "write":
        write(argv[2])
    elif len(argv) >= 4 and argv[1] == "dequant":
        dequant(argv[2], argv[3])
    elif len(argv) >= 3 and argv[1] == "npy":
        npy(argv[2])
    elif len(argv) >= 2 and argv[1] == "types":
        types()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
