"""The model file format: round trips, hostile files, signatures, atomic writes."""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import pickle
import struct
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedep import _atomic
from fedep._atomic import atomic_write
from fedep.modelfile import (
    FORMAT,
    FORMAT_VERSION,
    ModelFileError,
    generate_signing_key,
    read_model_file,
    write_model_file,
)
from fedep.modelfile.meta import _meta_digest, _total_digest

SECRET = b"a shared secret of 32 bytes ...!"

META = {
    "class": "FedEP",
    "params": {"n_components": 2, "alpha": 0.5, "name": "x", "flag": True, "none": None},
    "scalars": {"threshold_": 1.25, "n_features_in_": 3},
    "history": [[1, 2.5], [3, -4.0e-300]],
    "unicode": 'é ☃ "quoted" [not a bracket] \\',
}


def _arrays() -> dict[str, np.ndarray]:
    return {
        "components_": np.arange(6.0).reshape(2, 3) / 7,
        "clients_": np.array(["a", "bb", "ccc"]),
        "mask": np.array([True, False, True]),
        "counts": np.array([1, -2], dtype=np.int32),
    }


def _write(tmp_path: Path, name: str = "m.fedep", **kw) -> Path:
    p = tmp_path / name
    write_model_file(p, META, _arrays(), **kw)
    return p


def _refused(path: Path, *fragments: str, **kw) -> str:
    """Reading must raise ModelFileError with a one-line message containing fragments."""
    with pytest.raises(ModelFileError) as info:
        read_model_file(path, **kw)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"model file {path}: "), msg
    for f in fragments:
        assert f in msg, msg
    return msg


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def _zip(path: Path, members, compress=zipfile.ZIP_DEFLATED) -> Path:
    items = members.items() if isinstance(members, dict) else members
    with zipfile.ZipFile(path, "w", compression=compress) as zf:
        for name, data in items:
            zf.writestr(name, data)
    return path


def _envelope(path: Path) -> dict:
    return json.loads(_members(path)["__meta__.json"])


def _with_envelope(path: Path, env: dict, out: Path | None = None) -> Path:
    members = _members(path)
    members["__meta__.json"] = json.dumps(env).encode()
    return _zip(out or path, members)


def _reseal(env: dict) -> dict:
    """What a forger does: recompute the (keyless) digests after an edit."""
    env["meta_sha256"] = _meta_digest(env["meta"], env["arrays"])
    env["sha256"] = _total_digest(
        env["meta_sha256"], {k: v["sha256"] for k, v in env["arrays"].items()}
    )
    return env


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _npy_header(shape, descr: str = "<f8") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return buf.getvalue()


def _bounded(fn, seconds: float = 2.0, megabytes: float = 50.0):
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        return fn()
    finally:
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert elapsed < seconds, f"took {elapsed:.1f} s"
        assert peak < megabytes * 2**20, f"peak {peak / 2**20:.0f} MiB"


# --------------------------------------------------------------------------- round trip


def test_round_trip_exact(tmp_path):
    arrays = {
        **_arrays(),
        "f32": np.linspace(-1, 1, 5, dtype=np.float32),
        "f16": np.array([0.5, -2], dtype=np.float16),
        "big_endian": np.arange(4, dtype=">i8").reshape(2, 2),
        "u8": np.array([0, 255], dtype=np.uint8),
        "c128": np.array([1 + 2j, -3j]),
        "scalar": np.array(3.5),
        "empty": np.zeros((0, 4)),
        "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        "wide_u": np.array([["αβγ", ""], ["x", "y" * 40]]),
    }
    p = tmp_path / "m.fedep"
    write_model_file(p, META, arrays)
    meta, got = read_model_file(p)
    assert meta == META
    assert json.dumps(meta, sort_keys=True) == json.dumps(META, sort_keys=True)
    assert set(got) == set(arrays)
    for k, a in arrays.items():
        assert got[k].dtype == a.dtype and got[k].shape == a.shape, k
        assert np.array_equal(got[k], a), k
    assert sorted(os.listdir(tmp_path)) == ["m.fedep"]
    with zipfile.ZipFile(p) as zf:
        names = zf.namelist()
    assert names[0] == "__meta__.json" and names[1:] == [f"{k}.npy" for k in sorted(arrays)]
    env = _envelope(p)
    assert env["format"] == FORMAT and env["format_version"] == FORMAT_VERSION == 2


def test_write_is_deterministic(tmp_path):
    a, b = _write(tmp_path, "a.fedep"), _write(tmp_path, "b.fedep")
    assert a.read_bytes() == b.read_bytes()


def test_highly_compressible_array_is_stored_and_loads(tmp_path):
    p = tmp_path / "z.fedep"
    write_model_file(p, {}, {"zeros": np.zeros(600_000)})
    with zipfile.ZipFile(p) as zf:
        assert zf.getinfo("zeros.npy").compress_type == zipfile.ZIP_STORED
    _, got = read_model_file(p)
    assert not got["zeros"].any() and got["zeros"].shape == (600_000,)


@pytest.mark.parametrize(
    "meta, arrays, fragment",
    [
        ({"x": float("nan")}, {}, "finite"),
        ({"x": (1, 2)}, {}, "tuple"),
        ({"x": np.float32(1.0)}, {}, ".item()"),
        ({"x": [np.int64(1)]}, {}, ".item()"),
        ({1: 2}, {}, "non-string key"),
        ([1], {}, "dict"),
        ({}, {"o": np.array([None, 1], dtype=object)}, "no object dtype"),
        ({}, {"s": np.array([b"x"])}, "dtype"),
        ({}, {"rec": np.zeros(2, dtype=[("a", "<f8")])}, "dtype"),
        ({}, {"../x": np.zeros(2)}, "not allowed"),
        ({}, {"__meta__": np.zeros(2)}, "not allowed"),
        ({"deep": json.loads("[" * 70 + "]" * 70)}, {}, "nested"),
    ],
)
def test_write_refuses_bad_input_and_writes_nothing(tmp_path, meta, arrays, fragment):
    p = tmp_path / "m.fedep"
    with pytest.raises(ValueError) as info:
        write_model_file(p, meta, arrays)
    assert fragment in str(info.value)
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- hostile files


def test_edited_metadata_values_are_detected(tmp_path):
    p = _write(tmp_path)
    for edit in (-1.0, 0.0, 1.2500001):
        env = _envelope(p)
        env["meta"]["scalars"]["threshold_"] = edit
        _refused(_with_envelope(p, env, tmp_path / "e.fedep"), "metadata was altered")
    env = _envelope(p)
    env["meta"]["params"]["n_components"] = 3
    _refused(_with_envelope(p, env, tmp_path / "e.fedep"), "altered", "integrity digest")
    raw = _members(p)["__meta__.json"].replace(b'"threshold_":1.25', b'"threshold_":NaN')
    members = _members(p)
    members["__meta__.json"] = raw
    _refused(_zip(tmp_path / "nan.fedep", members), "metadata is not valid JSON", "NaN")


def test_list_metadata_missing_keys_and_versions(tmp_path):
    p = _write(tmp_path)
    members = _members(p)
    members["__meta__.json"] = b"[1, 2, 3]"
    _refused(_zip(tmp_path / "list.fedep", members), "is not a fedep model file", "list")
    for key in ("meta_sha256", "arrays", "meta"):
        env = _envelope(p)
        del env[key]
        _refused(_with_envelope(p, env, tmp_path / "k.fedep"), "wrong keys", f"missing {key}")
    env = _envelope(p)
    del env["meta"]["scalars"]  # the caller's key: caught by the digest
    _refused(_with_envelope(p, env, tmp_path / "s.fedep"), "metadata was altered")
    env = _envelope(p)
    env["format_version"] = 3
    _refused(_with_envelope(p, env, tmp_path / "v.fedep"), "format version 3", "newer")
    env = _envelope(p)
    env["format"] = "other"
    _refused(_with_envelope(p, env, tmp_path / "f.fedep"), "is not a fedep model file")
    members["__meta__.json"] = b'{"format": "fedep-model", "format": "x"}'
    _refused(_zip(tmp_path / "dup.fedep", members), "duplicate key")
    members["__meta__.json"] = b"\xff\xfe{}"
    _refused(_zip(tmp_path / "utf.fedep", members), "not valid JSON")


def test_deeply_nested_metadata_is_refused_quickly(tmp_path):
    members = _members(_write(tmp_path))
    members["__meta__.json"] = b"[" * 200_000 + b"]" * 200_000
    p = _zip(tmp_path / "deep.fedep", members)
    _bounded(lambda: _refused(p, "nested 200000 deep > cap 64"))
    members["__meta__.json"] = b'{"a": ' * 200_000 + b"1" + b"}" * 200_000
    _bounded(lambda: _refused(_zip(p, members), "nested"))


def test_npy_header_claiming_1e12_elements_is_refused_before_allocation(tmp_path):
    p = _write(tmp_path)
    members = _members(p)
    members["components_.npy"] = _npy_header((10**12,)) + bytes(48)
    forged = _zip(tmp_path / "big.fedep", members)
    _bounded(lambda: _refused(forged, "'components_'", "> cap 4.0 GiB"))
    # the manifest agrees (digests recomputed by a forger): refused on the manifest
    env = _reseal({**_envelope(forged)})
    env["arrays"]["components_"]["shape"] = [10**12]
    env = _reseal(env)
    forged2 = _with_envelope(forged, env, tmp_path / "big2.fedep")
    _bounded(lambda: _refused(forged2, "would take 7.3 TiB > cap"))
    # caps raised by the caller: the header still cannot exceed what the member holds
    _bounded(
        lambda: _refused(
            forged2,
            "header claims 7.3 TiB but the member holds 48 B",
            max_array_bytes=10**13,
            max_bytes=10**14,
        )
    )


def test_zip_bomb_is_refused_from_the_directory(tmp_path):
    p = tmp_path / "bomb.fedep"
    n = 100 * 2**20
    env = _reseal(_envelope(_write(tmp_path)))
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("__meta__.json", json.dumps(env))
        for name in ("clients_", "counts", "mask"):
            zf.writestr(f"{name}.npy", _npy(_arrays()[name]))
        with zf.open("components_.npy", "w") as out:
            out.write(_npy_header((n // 8,)))
            zeros = bytes(2**20)
            for _ in range(n // 2**20):
                out.write(zeros)
    assert p.stat().st_size < 300_000
    _bounded(lambda: _refused(p, "'components_.npy' would inflate", "ratio cap 200", "bomb"))
    _bounded(lambda: _refused(p, "would inflate to 100.0 MiB > cap 1.0 MiB", max_array_bytes=2**20))
    _bounded(
        lambda: _refused(
            p, "would inflate to 100.0 MiB > cap 10.0 MiB", max_bytes=10 * 2**20, max_ratio=2000
        )
    )


def _patch_declared_size(data: bytes, member: str, size: int) -> bytes:
    """Rewrite the uncompressed size that the central directory declares for ``member``."""
    buf = bytearray(data)
    pos = buf.find(b"PK\x01\x02")
    while pos >= 0:
        name_len = struct.unpack_from("<H", buf, pos + 28)[0]
        if buf[pos + 46 : pos + 46 + name_len] == member.encode():
            struct.pack_into("<L", buf, pos + 24, size)
            return bytes(buf)
        pos = buf.find(b"PK\x01\x02", pos + 1)
    raise AssertionError(member)


def test_zip_bomb_with_lying_declared_size_is_bounded(tmp_path):
    members = _members(_write(tmp_path))
    real = members["__meta__.json"]
    members["__meta__.json"] = real + b" " * (60 * 2**20)  # valid JSON, 60 MiB inflated
    p = _zip(tmp_path / "lie.fedep", members)
    p.write_bytes(_patch_declared_size(p.read_bytes(), "__meta__.json", len(real)))
    assert p.stat().st_size < 200_000
    _bounded(lambda: _refused(p, "truncated or corrupt", "CRC"))


@pytest.mark.parametrize(
    "content, fragment",
    [
        (pickle.dumps({"components_": [1.0, 2.0]}, protocol=4), "looks like a Python pickle"),
        (pickle.dumps([1, 2], protocol=2), "looks like a Python pickle"),
        (b"gateway,f1,f2\n1,0.5,0.25\n2,0.1,0.3\n", "looks like a CSV text file"),
        (b"", "is empty"),
        (gzip.compress(b"anything"), "looks like a gzip file"),
        (b"\x93NUMPY\x01\x00" + b"x" * 20, "bare NumPy .npy"),
        (b"hello world\n", "looks like a text file"),
        (bytes(range(256)), "unrecognised binary content"),
        (b"PK\x05\x06" + bytes(18), "empty zip archive"),
    ],
)
def test_foreign_files_are_named(tmp_path, content, fragment):
    p = tmp_path / "in.fedep"
    p.write_bytes(content)
    msg = _refused(p, fragment)
    assert "pickle.load" not in msg and "allow_pickle" not in msg


def test_gzipped_model_file_and_missing_paths(tmp_path):
    p = _write(tmp_path)
    g = tmp_path / "m.fedep.gz"
    g.write_bytes(gzip.compress(p.read_bytes()))
    _refused(g, "looks like a gzip file")
    _refused(tmp_path / "absent.fedep", "does not exist")
    _refused(tmp_path, "is a directory")
    big = tmp_path / "big.fedep"
    big.write_bytes(b"PK\x03\x04" + bytes(2000))
    _refused(big, "is 2.0 KiB > cap 1.0 KiB", max_bytes=1024)


def test_every_truncation_is_refused(tmp_path):
    p = _write(tmp_path)
    data = p.read_bytes()
    t = tmp_path / "t.fedep"
    lengths = [*range(0, len(data) - 400, 5), *range(len(data) - 400, len(data))]
    for n in lengths:  # every cut through the central directory, every 5th before
        t.write_bytes(data[:n])
        _refused(t)


def test_unexpected_members_are_refused(tmp_path):
    p = _write(tmp_path)
    members = _members(p)
    _refused(_zip(tmp_path / "x.fedep", {**members, "evil.txt": b"x"}), "unexpected zip member")
    _refused(
        _zip(tmp_path / "x.fedep", {**members, "../../etc/x.npy": _npy(np.zeros(2))}),
        "unexpected zip member '../../etc/x.npy'",
    )
    _refused(_zip(tmp_path / "x.fedep", {**members, "/abs.npy": b""}), "unexpected zip member")
    _refused(
        _zip(tmp_path / "x.fedep", {**members, "extra.npy": _npy(np.zeros(2))}),
        "unexpected zip member 'extra.npy'",
    )
    less = {k: v for k, v in members.items() if k != "mask.npy"}
    _refused(_zip(tmp_path / "x.fedep", less), "lacks the array member 'mask.npy'")
    with pytest.warns(UserWarning):  # zipfile warns about the duplicate name
        dup = _zip(tmp_path / "x.fedep", [*members.items(), ("mask.npy", members["mask.npy"])])
    _refused(dup, "twice")
    _refused(_zip(tmp_path / "x.fedep", {"a.csv": b"1"}), "not a fedep model file")
    bz = _zip(tmp_path / "bz.fedep", members, compress=zipfile.ZIP_BZIP2)
    _refused(bz, "unsupported compression 12")
    many = _zip(tmp_path / "many.fedep", {**members, **{f"a{i}.npy": b"" for i in range(1100)}})
    _refused(many, "zip members > cap 1024")


def test_object_dtype_and_pickled_members_are_refused(tmp_path):
    p = _write(tmp_path)
    members = _members(p)
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    members["counts.npy"] = buf.getvalue()
    _refused(_zip(tmp_path / "o.fedep", members), "refused dtype")


def test_format_version_1_npz_is_named(tmp_path):
    p = tmp_path / "old.fedep"
    with open(p, "wb") as fh:
        np.savez_compressed(fh, __meta__=np.frombuffer(b"{}", np.uint8), components_=np.ones(2))
    _refused(p, "format version 1")


# --------------------------------------------------------------------------- fuzzing


@pytest.fixture(scope="module")
def fuzz_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    small = {"w": np.array([[1.5, -2.0], [0.0, 3.25]]), "ids": np.array(["a", "b"])}
    meta = {"t": 0.5, "k": [1, "x"]}
    plain, signed = d / "plain.fedep", d / "signed.fedep"
    write_model_file(plain, meta, small)
    write_model_file(signed, meta, small, sign_key=SECRET)
    return d, meta, small, {"plain": plain.read_bytes(), "signed": signed.read_bytes()}


def _loads_same_or_refuses(path: Path, meta, arrays, **kw) -> None:
    try:
        got_meta, got = read_model_file(path, **kw)
    except ModelFileError as exc:
        assert "\n" not in str(exc)
        return
    assert got_meta == meta
    assert set(got) == set(arrays)
    for k, a in arrays.items():
        assert got[k].dtype == a.dtype and np.array_equal(got[k], a)


#: The fuzz tests' settings: many seeded examples over one fixture of model files.
_FUZZ = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@_FUZZ
@given(data=st.data())
def test_fuzz_one_bit_flip(fuzz_files, data):
    d, meta, arrays, files = fuzz_files
    kind = data.draw(st.sampled_from(["plain", "signed"]))
    raw = bytearray(files[kind])
    bit = data.draw(st.integers(0, len(raw) * 8 - 1))
    raw[bit // 8] ^= 1 << (bit % 8)
    p = d / "flip.fedep"
    p.write_bytes(bytes(raw))
    key = {"verify_key": SECRET} if kind == "signed" else {}
    _loads_same_or_refuses(p, meta, arrays, **key)


@_FUZZ
@given(data=st.data())
def test_fuzz_overwrite_byte(fuzz_files, data):
    d, meta, arrays, files = fuzz_files
    kind = data.draw(st.sampled_from(["plain", "signed"]))
    raw = bytearray(files[kind])
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] = data.draw(st.integers(0, 255))
    p = d / "byte.fedep"
    p.write_bytes(bytes(raw))
    _loads_same_or_refuses(p, meta, arrays)


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, (*path, i))
    else:
        yield path, obj


def _changed(v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, (int, float)):
        return v + 1
    if isinstance(v, str):  # same length: fits the array's fixed-width dtype
        return ("y" if v[:1] != "y" else "z") + v[1:]
    return 0


def test_editing_any_stored_item_is_detected(tmp_path):
    p = _write(tmp_path)
    e = tmp_path / "e.fedep"
    count = 0
    for path, value in _leaves(_envelope(p)):
        if path[0] == "format_version":
            continue  # refused as another version, checked elsewhere
        env = _envelope(p)
        node = env
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = (
            "0" * 64 if isinstance(value, str) and len(value) == 64 else _changed(value)
        )
        _refused(_with_envelope(p, env, e))
        count += 1
    for name, a in _arrays().items():
        for i in range(a.size):
            b = a.copy().reshape(-1)
            b[i] = _changed(b[i].item())
            members = _members(p)
            members[f"{name}.npy"] = _npy(b.reshape(a.shape))
            _refused(_zip(e, members), f"array '{name}' was altered")
            count += 1
    assert count > 30


def test_edits_of_a_signed_file_are_refused(tmp_path):
    p = _write(tmp_path, sign_key=SECRET)
    env = _envelope(p)
    env["meta"]["scalars"]["threshold_"] = 99.0
    forged = _with_envelope(p, _reseal(env), tmp_path / "f.fedep")
    _refused(forged, "signature block does not match the content")
    _refused(forged, "signature block does not match", verify_key=SECRET)
    members = _members(forged)
    sig = json.loads(members["__signature__.json"])
    sig["signed_sha256"] = env["sha256"]
    members["__signature__.json"] = json.dumps(sig).encode()
    forged = _zip(forged, members)
    _refused(forged, "signature does not verify", verify_key=SECRET)
    read_model_file(forged)  # without a key a consistent forgery is undetectable


# --------------------------------------------------------------------------- signatures


def test_ed25519_round_trip_and_refusals(tmp_path):
    generate_signing_key(tmp_path / "k.pem", tmp_path / "k.pub")
    generate_signing_key(tmp_path / "o.pem", tmp_path / "o.pub")
    assert (tmp_path / "k.pem").stat().st_mode & 0o077 == 0
    with pytest.raises(FileExistsError):
        generate_signing_key(tmp_path / "k.pem", tmp_path / "k2.pub")
    p = _write(tmp_path, sign_key=tmp_path / "k.pem")
    for key in (tmp_path / "k.pub", str(tmp_path / "k.pub"), tmp_path / "k.pem"):
        meta, arrays = read_model_file(p, verify_key=key, require_signature=True)
        assert meta == META and np.array_equal(arrays["components_"], _arrays()["components_"])
    assert read_model_file(p)[0] == META  # signed, no key: integrity only
    _refused(p, "does not verify", "signed with key 'sha256:", verify_key=tmp_path / "o.pub")
    _refused(p, "does not verify", "ed25519", verify_key=SECRET)
    members = _members(p)
    sig = json.loads(members["__signature__.json"])
    raw = bytearray(__import__("base64").b64decode(sig["signature"]))
    raw[0] ^= 1
    sig["signature"] = __import__("base64").b64encode(bytes(raw)).decode()
    members["__signature__.json"] = json.dumps(sig).encode()
    _refused(
        _zip(tmp_path / "bad.fedep", members), "does not verify", verify_key=tmp_path / "k.pub"
    )
    with pytest.raises(ValueError, match="not an Ed25519 public key"):
        read_model_file(p, verify_key=tmp_path / "m.fedep")


def test_hmac_round_trip_and_refusals(tmp_path):
    p = _write(tmp_path, sign_key=SECRET)
    assert read_model_file(p, verify_key=SECRET)[0] == META
    assert read_model_file(p, verify_key="hmac:" + SECRET.decode(), require_signature=True)[0]
    q = _write(tmp_path, "q.fedep", sign_key="hmac:" + SECRET.decode())
    assert q.read_bytes() == p.read_bytes()
    _refused(p, "signature does not verify", verify_key=b"another secret of 32 bytes .....")
    _refused(p, "hmac-sha256 signature, an Ed25519 key", verify_key=_keypair(tmp_path))
    with pytest.raises(ValueError, match="at least 16 bytes"):
        write_model_file(tmp_path / "s.fedep", {}, {}, sign_key=b"short")
    with pytest.raises(ValueError, match="at least 16 bytes"):
        read_model_file(p, verify_key=b"short")
    assert not (tmp_path / "s.fedep").exists()


def _keypair(tmp_path: Path) -> Path:
    generate_signing_key(tmp_path / "x.pem", tmp_path / "x.pub")
    return tmp_path / "x.pub"


def test_unsigned_file_with_key_or_required_signature(tmp_path):
    p = _write(tmp_path)
    _refused(p, "is not signed but a verify key was given", verify_key=SECRET)
    _refused(p, "is not signed", verify_key=SECRET, require_signature=True)
    _refused(p, "is not signed", verify_key=_keypair(tmp_path), require_signature=True)
    with pytest.raises(ValueError, match="needs a verify_key"):
        read_model_file(p, require_signature=True)
    signed = _write(tmp_path, "s.fedep", sign_key=SECRET)
    stripped = {k: v for k, v in _members(signed).items() if k != "__signature__.json"}
    assert _zip(tmp_path / "u.fedep", stripped)
    _refused(tmp_path / "u.fedep", "is not signed", verify_key=SECRET, require_signature=True)


# --------------------------------------------------------------------------- atomic writes


class _FullDisk:
    """A file proxy that runs out of space after ``limit`` bytes."""

    def __init__(self, f, limit: int):
        self._f, self._left = f, limit

    def write(self, b):
        if len(b) > self._left:
            raise OSError(errno.ENOSPC, "No space left on device")
        self._left -= len(b)
        return self._f.write(b)

    def __getattr__(self, name):
        return getattr(self._f, name)


@pytest.mark.parametrize("limit", [0, 100, 1000])
def test_full_disk_mid_write_keeps_the_old_file(tmp_path, monkeypatch, limit):
    p = _write(tmp_path)
    before = p.read_bytes()
    real_fdopen = os.fdopen
    monkeypatch.setattr(
        _atomic.os, "fdopen", lambda *a, **k: _FullDisk(real_fdopen(*a, **k), limit)
    )
    with pytest.raises(OSError) as info:
        write_model_file(p, {"new": 1}, {"x": np.ones(10_000)})
    assert info.value.errno == errno.ENOSPC
    assert p.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.fedep"]


def test_fsync_failure_and_interrupt_keep_the_old_file(tmp_path, monkeypatch):
    p = _write(tmp_path)
    before = p.read_bytes()

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(_atomic.os, "fsync", no_space)
        with pytest.raises(OSError, match="No space"):
            write_model_file(p, {"new": 1}, {})
    assert p.read_bytes() == before and os.listdir(tmp_path) == ["m.fedep"]
    with pytest.raises(KeyboardInterrupt), atomic_write(p) as fh:
        fh.write(b"partial")
        raise KeyboardInterrupt
    assert p.read_bytes() == before and os.listdir(tmp_path) == ["m.fedep"]
    with atomic_write(p, "w") as fh:
        fh.write("new text ☃")
    assert p.read_text(encoding="utf-8") == "new text ☃"


def test_atomic_write_keeps_mode_and_symlink(tmp_path):
    p = tmp_path / "m.fedep"
    p.write_bytes(b"old")
    p.chmod(0o640)
    link = tmp_path / "link.fedep"
    link.symlink_to(p)
    write_model_file(link, {}, {})
    assert link.is_symlink() and read_model_file(p)[0] == {}
    assert p.stat().st_mode & 0o777 == 0o640


def test_write_refuses_a_directory(tmp_path):
    with pytest.raises(IsADirectoryError):
        write_model_file(tmp_path, {}, {})
