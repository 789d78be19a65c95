"""``fedep models``: a model's lineage, and the drift between two models.

::

    fedep models show MODEL [--verify-key KEY] [--json]
    fedep models diff A B [--verify-key KEY] [--json]

``show`` prints a model's id, its parent's id and file digest, its data window (rows,
files, first and last time) and its gateways. ``diff`` compares two models of the same
features (:func:`fedep.evaluation.drift.model_diff`): the principal angles and projector
distance of the global bases, the threshold change, how far each gateway's personalised
basis moved, the gateways new or gone, and names those that moved far (the rule is
printed). With ``--verify-key`` both files must be signed with that key; ``diff`` says
whether ``B`` names ``A`` as its parent and whether ``B`` records ``A``'s file digest
(``fedep fit --warm-start A`` writes both), so a chain of signed models can be checked
link by link.
"""

from __future__ import annotations

import json

from fedep._json import jsonable
from fedep.cli._common import command_parser, load_model
from fedep.evaluation.drift import model_diff


def _key_option(p) -> None:
    p.add_argument(
        "--verify-key",
        metavar="KEY",
        help="refuse unsigned or altered models: an Ed25519 public key PEM file, or a "
        "shared secret as hmac:SECRET or @FILE",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def register(sub) -> None:
    p = command_parser(
        sub,
        "models",
        description="A model's lineage (fedep models show) and the drift between two "
        "models (fedep models diff).",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", title="verbs")
    verbs.required = True
    show = verbs.add_parser("show", help="a model's id, parent, data window and gateways")
    show.add_argument("model", metavar="MODEL", help="model file")
    _key_option(show)
    show.set_defaults(func=cmd_show)
    diff = verbs.add_parser(
        "diff", help="subspace distance, threshold change and per-gateway moves from A to B"
    )
    diff.add_argument("a", metavar="A", help="the earlier model file (e.g. the parent)")
    diff.add_argument("b", metavar="B", help="the later model file (e.g. its warm start)")
    _key_option(diff)
    diff.set_defaults(func=cmd_diff)


def lineage_of(det) -> dict:
    """The model's lineage plus its file digest (``sha256``); an empty lineage for a
    file written before lineages."""
    out = dict(getattr(det, "lineage_", None) or {})
    out["sha256"] = getattr(det, "file_sha256_", None)
    out["class"] = type(det).__name__
    out["rank"] = int(det.components_.shape[0])
    out["n_features"] = int(det.components_.shape[1])
    return out


def _window_text(w: dict) -> str:
    parts = [f"{w.get('rows', '?')} rows"]
    if "ts_first" in w:
        parts.append(f"{w.get('time_column', 'ts')} {w['ts_first']:.6g} .. {w['ts_last']:.6g}")
    if w.get("files"):
        parts.append("files " + ", ".join(f"{f['name']} ({f['rows']})" for f in w["files"]))
    return "; ".join(parts)


def cmd_show(args) -> int:
    det = load_model(args.model, args.verify_key)
    lin = lineage_of(det)
    if args.json:
        print(json.dumps(jsonable(lin), indent=1))
        return 0
    print(f"model {lin.get('id') or '(no lineage: written before lineages)'}")
    print(f"  {lin['class']}, rank {lin['rank']}, {lin['n_features']} features")
    print(f"  file sha256 {lin['sha256']}" + (" (signature verified)" if args.verify_key else ""))
    if lin.get("id"):
        print(f"  parent {lin.get('parent') or '-'}")
        if lin.get("parent_sha256"):
            print(f"  parent file sha256 {lin['parent_sha256']}")
        print(f"  data window: {_window_text(lin.get('window', {}))}")
        print(f"  gateways ({len(lin['gateways'])}): {', '.join(lin['gateways'])}")
    return 0


def cmd_diff(args) -> int:
    a = load_model(args.a, args.verify_key)
    b = load_model(args.b, args.verify_key)
    out = model_diff(a, b)
    la, lb = lineage_of(a), lineage_of(b)
    link = out["lineage"]
    link["b_records_a_sha256"] = bool(la["sha256"]) and lb.get("parent_sha256") == la["sha256"]
    link["verified"] = args.verify_key is not None
    if args.json:
        print(json.dumps(jsonable(out), indent=1))
        return 0
    g = out["global"]
    print(f"global basis: projector distance {g['projector_distance']:.4f} (rms sine "
          f"{g['rms_sine']:.4f}), largest principal angle {g['max_angle_deg']:.2f} deg, "
          f"rank {g['rank'][0]} -> {g['rank'][1]}")  # fmt: skip
    t = out["threshold"]
    print(f"threshold: {t['a']:.6g} -> {t['b']:.6g} (change {t['change']:+.6g})")
    print("gateway    basis rms sine  max angle (deg)  pull ratio B/A")
    for lab, m in out["gateways"].items():
        flag = "  MOVED" if lab in out["moved"] else ""
        ratio = f"{m['pull_ratio']:14.3g}" if "pull_ratio" in m else f"{'-':>14}"
        print(f"{lab:>7}  {m['rms_sine']:16.4f}  {m['max_angle_deg']:15.2f}  {ratio}{flag}")
    if out["new"]:
        print(f"new gateways: {', '.join(out['new'])}")
    if out["gone"]:
        print(f"gateways gone: {', '.join(out['gone'])}")
    moved = ", ".join(out["moved"]) or "none"
    print(f"moved far: {moved} ({out['rule']})")
    child = "yes" if link["b_is_child"] else "no"
    digest = "yes" if link["b_records_a_sha256"] else "no"
    print(
        f"lineage: B's parent is A: {child}; B records A's file digest: {digest}"
        + ("; both signatures verified" if link["verified"] else "")
    )
    return 0
