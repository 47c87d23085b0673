"""Verify an `agentd audit export` offline: python3 verify_audit.py export.jsonl (README: Privacy and audit)."""

import hashlib
import json
import sys

H = hashlib.sha256


def canon(value):  # JSON with sorted keys, no spaces, ASCII only
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("ascii")


def commit(e, field, value):  # salted by the field's nonce; an erased field keeps only its commitment
    if field not in e["erased"]:
        return H(bytes.fromhex(e["salts"].get(field, "")) + canon(value)).hexdigest()
    return e["erased"][field] if value is None else "an erased field that holds a value"


def event_hash(e, prev):
    names = set(e["data"]) | {f[5:] for f in e["erased"] if f.startswith("data.")}
    body = {
        "v": 1,
        "ts": float(e["ts"]),
        "agent": e["agent"],
        "kind": e["kind"],
        "action": e["action"],
        "run_id": e["run_id"],
        "daemon": e["daemon"],
        "conversation_key": commit(e, "conversation_key", e["conversation_key"]),
        "data": {k: commit(e, "data." + k, e["data"].get(k)) for k in names},
    }
    return H(bytes.fromhex(prev) + e["seq"].to_bytes(8, "big") + H(canon(body)).digest()).hexdigest()


chains = {}  # chain -> (seq, hash) of the last event verified
for n, line in enumerate(open(sys.argv[1], encoding="utf-8"), 1):
    e = json.loads(line)
    seq, prev = chains.get(e["chain"], (e["seq"] - 1, e["prev_hash"]))  # an export --since starts mid-chain
    if e["seq"] != seq + 1 or e["prev_hash"] != prev or event_hash(e, prev) != e["hash"]:
        sys.exit(f"line {n}: chain {e['chain']} is broken at event {e['seq']}")
    chains[e["chain"]] = (e["seq"], e["hash"])
for chain, (seq, digest) in sorted(chains.items()):
    print(f"{chain}: verified up to event {seq}, head {digest}")
