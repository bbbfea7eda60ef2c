"""The seal: canonical JSON, Ed25519, and kiln_verify on real certificate PDFs (valid, tampered,
unknown key)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command

from portal.certificates import keys, pdf, seal, signing


def test_it_writes_canonical_json_that_does_not_depend_on_key_order():
    a = {"b": 1, "a": {"y": 2.5, "x": [1.0, None, True, "é"]}}
    b = {"a": {"x": [1.0, None, True, "é"], "y": 2.5}, "b": 1}
    assert seal.canonical_bytes(a) == seal.canonical_bytes(b)
    assert seal.canonical_bytes(a) == '{"a":{"x":["1.0",null,true,"é"],"y":"2.5"},"b":1}'.encode()


def test_it_writes_every_float_as_a_string():
    assert seal.canonical({"v": 1e-05, "n": float("nan"), "i": float("inf"), "k": 3}) == {
        "v": "1e-05",
        "n": "NaN",
        "i": "Infinity",
        "k": 3,
    }
    with pytest.raises(TypeError):
        seal.canonical_bytes({"when": object()})


def _payload_bytes(fp: str) -> bytes:
    return seal.canonical_bytes({"number": "N-1", "seal": {"key_fingerprint": fp}, "m": [{"value": 1.5}]})


def test_it_verifies_a_sound_seal_and_names_what_failed_otherwise():
    key = keys.signing_identity_load().seal_key
    fp = seal.fingerprint(key.public_key())
    data = _payload_bytes(fp)
    sealed = seal.seal(data, key)
    assert seal.verify(data, sealed, [fp]).status == seal.VALID
    changed = seal.verify(data.replace(b"1.5", b"1.6"), sealed, [fp])
    assert changed.status == seal.TAMPERED and "digest mismatch" in changed.detail
    forged = dict(sealed, sha256=seal.sha256_hex(data.replace(b"1.5", b"1.6")))
    assert "signature invalid" in seal.verify(data.replace(b"1.5", b"1.6"), forged, [fp]).detail
    assert seal.verify(data, sealed, ["SHA256:someone-else"]).status == seal.UNKNOWN_KEY


def test_it_calls_any_changed_byte_of_the_payload_tampered():
    key = keys.signing_identity_load().seal_key
    fp = seal.fingerprint(key.public_key())
    data = _payload_bytes(fp)
    sealed = seal.seal(data, key)
    for position in range(len(data)):
        changed = bytearray(data)
        changed[position] ^= 0x01
        assert seal.verify(bytes(changed), sealed, [fp]).status == seal.TAMPERED, position


def _verify_cli(path: Path) -> tuple[int, dict]:
    from io import StringIO

    out = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("kiln_verify", str(path), "--json", stdout=out)
    return exited.value.code, json.loads(out.getvalue())


def _repack(original: bytes, payload_bytes: bytes, tmp_path: Path, name: str) -> Path:
    """A real PDF with the original seal but another payload, signed again with the site's own PDF key:
    what a forger holding the PDF-signing key (not the seal key) would produce."""
    _, seal_data = pdf.pdf_extract(original)
    document = pdf.pdf_render(
        payload=json.loads(payload_bytes), payload_bytes=payload_bytes, seal_data=seal_data, charts=[], charts_note=""
    )
    path = tmp_path / name
    path.write_bytes(signing.pdf_sign(document, keys.signing_identity_load(), reason="forged", location=""))
    return path


def test_kiln_verify_says_valid_for_the_issued_pdf(issued, tmp_path):
    path = tmp_path / "cert.pdf"
    path.write_bytes(bytes(issued.pdf))
    code, answer = _verify_cli(path)
    assert (code, answer["status"], answer["number"]) == (0, "valid", issued.number)
    assert "not revoked" in answer["notes"][0]


def test_kiln_verify_says_tampered_after_one_measurement_changes(issued, tmp_path):
    payload = json.loads(issued.payload)
    check = payload["nodes"][1]["checks"]["ecc-health"]
    assert check["out_of_spec"][0]["value"] == "2.0"
    check["out_of_spec"][0]["value"] = "0.0"  # hide n02's ECC errors
    path = _repack(bytes(issued.pdf), seal.canonical_bytes(payload), tmp_path, "measurement.pdf")
    code, answer = _verify_cli(path)
    assert (code, answer["status"]) == (1, "tampered")
    assert "digest mismatch" in answer["detail"]


def test_kiln_verify_says_tampered_after_any_byte_of_the_payload_changes(issued, tmp_path):
    data = issued.payload.encode()
    at = data.index(b'"verdict":"') + len(b'"verdict":"')
    changed = data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]  # one byte, still JSON
    code, answer = _verify_cli(_repack(bytes(issued.pdf), changed, tmp_path, "byte.pdf"))
    assert (code, answer["status"]) == (1, "tampered")


def test_kiln_verify_says_unknown_key_for_another_sites_pdf(issued, settings, tmp_path):
    path = tmp_path / "cert.pdf"
    path.write_bytes(bytes(issued.pdf))
    settings.KILN_KEY_DIR = str(tmp_path / "other-site")
    keys.keyring_init(site="Other site")
    code, answer = _verify_cli(path)
    assert (code, answer["status"]) == (2, "unknown key")
    assert "no trusted CA issued" in answer["detail"]


def test_kiln_verify_keeps_trusting_a_rotated_key(issued, tmp_path):
    path = tmp_path / "cert.pdf"
    path.write_bytes(bytes(issued.pdf))
    old = keys.signing_identity_load()
    new, retired = keys.keyring_rotate()
    assert retired == [old.generation] and new.generation != old.generation
    assert seal.fingerprint(new.seal_key.public_key()) != issued.key_fingerprint
    assert not (keys.key_dir() / "generations" / old.generation / keys.SEAL_KEY).exists(), "old private key gone"
    assert _verify_cli(path)[0] == 0


def test_kiln_verify_trusts_an_imported_public_key_and_ca(issued, settings, tmp_path):
    path = tmp_path / "cert.pdf"
    path.write_bytes(bytes(issued.pdf))
    exported = tmp_path / "old-site.pem"
    exported.write_text(keys.public_export())
    settings.KILN_KEY_DIR = str(tmp_path / "new-site")
    keys.keyring_init(site="New site")
    assert _verify_cli(path)[0] == 2
    blocks = exported.read_text().split("# ")[1:]
    for index, block in enumerate(blocks):
        single = tmp_path / f"part{index}.pem"
        single.write_text(block.split("\n", 1)[1])
        keys.trust_import(path=single)
    assert _verify_cli(path)[0] == 0


def test_kiln_verify_says_so_for_a_pdf_that_is_not_a_certificate(tmp_path):
    import weasyprint

    path = tmp_path / "plain.pdf"
    path.write_bytes(weasyprint.HTML(string="<p>hello</p>").write_pdf())
    code, answer = _verify_cli(path)
    assert (code, answer["status"]) == (3, "not a certificate")
