"""wss:// with a self-signed certificate: trusted with ca_file, refused
clearly without it."""

from __future__ import annotations

import shutil
import subprocess

import pytest

import tunefleet
from conftest import ADMIN_TOKEN, Master


def test_tls_with_a_ca_file(tmp_path):
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "2", "-keyout", str(key), "-out", str(cert), "-subj", "/CN=farm",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:FALSE"],
                   check=True, capture_output=True)
    m = Master(tmp_path, ["--tls-cert", str(cert), "--tls-key", str(key)])
    try:
        url = f"wss://{m.addr}"
        fleet = tunefleet.connect(url, token=ADMIN_TOKEN, ca_file=str(cert))
        assert fleet.status().jobs.total == 0 and fleet.url.startswith("wss://")
        fleet.close()
        with pytest.raises(tunefleet.TunefleetError) as e:
            tunefleet.connect(url, token=ADMIN_TOKEN)
        assert "not trusted" in str(e.value) and "ca_file" in str(e.value)
    finally:
        m.kill9()
