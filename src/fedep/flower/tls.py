"""Keys and certificates for a deployment across machines (``cryptography``).

Flower 1.42 secures a federation with TLS (the SuperLink's certificate, signed by a CA
every SuperNode trusts: ``flower-superlink --ssl-ca-certfile --ssl-certfile
--ssl-keyfile``, ``flower-supernode --root-certificates``) and SuperNode
authentication (an EC key pair per gateway on a NIST curve, in OpenSSH format: the
SuperNode signs its requests with the private key, ``--auth-supernode-private-key``;
the SuperLink, started with ``--enable-supernode-auth``, admits only the public keys
registered with ``flwr supernode register``).

:func:`write_server_files` writes a private CA and the SuperLink's certificate;
:func:`write_node_key` writes one gateway's key pair (best made on the gateway itself:
only its public key travels to the server). Private keys are written with mode 0600,
atomically. Nothing here is home-made cryptography: the keys, signatures and
certificates are ``cryptography``'s.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedep._atomic import atomic_write

__all__ = ["ServerFiles", "server_files", "write_node_key", "write_server_files"]

#: Names every server certificate holds besides the ones asked for, so that the
#: server's own ``flwr`` commands (and a test on one machine) reach it on loopback.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class ServerFiles:
    """The TLS files of a SuperLink: the CA certificate (what gateways trust), the
    server certificate and its private key, in one folder."""

    ca_cert: Path
    cert: Path
    key: Path

    def missing(self) -> list[Path]:
        """The files that do not exist."""
        return [p for p in (self.ca_cert, self.cert, self.key) if not p.is_file()]


def server_files(folder) -> ServerFiles:
    """The TLS file names :func:`write_server_files` uses in ``folder``."""
    folder = Path(folder)
    return ServerFiles(folder / "ca.crt", folder / "server.pem", folder / "server.key")


def _write(path: Path, data: bytes, private: bool) -> None:
    with atomic_write(path, "wb", perm=0o600 if private else 0o644) as fh:
        fh.write(data)


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _san(names) -> x509.SubjectAlternativeName:
    entries = []
    for n in dict.fromkeys([*names, *LOOPBACK_NAMES]):
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            entries.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(entries)


def write_server_files(folder, names: list[str], days: int = 825) -> ServerFiles:
    """Write a private CA (``ca.crt``, ``ca.key``) and a SuperLink certificate signed
    by it (``server.pem``, ``server.key``) in ``folder``.

    Parameters
    ----------
    folder : path
        Created if needed; existing files are replaced.
    names : list of str
        The server's host names and IP addresses, as the gateways will dial it
        (``--superlink HOST:PORT``); loopback names are always added.
    days : int, default 825
        Validity of both certificates.

    Returns
    -------
    ServerFiles
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    start, end = now - dt.timedelta(minutes=5), now + dt.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedep federation CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA384())
    )
    key = ec.generate_private_key(ec.SECP384R1())
    first = names[0] if names else "localhost"
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, first)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(_san(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA384())
    )
    files = server_files(folder)
    _write(folder / "ca.key", _pem_key(ca_key), private=True)
    _write(files.ca_cert, ca.public_bytes(serialization.Encoding.PEM), private=False)
    _write(files.key, _pem_key(key), private=True)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return files


def write_node_key(path) -> tuple[Path, Path]:
    """Write a gateway's SuperNode key pair: ``path`` (private, OpenSSH, mode 0600) and
    ``path.pub`` (public, OpenSSH: what the server registers). EC P-384.

    Returns
    -------
    private, public : Path
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    pub = path.with_name(path.name + ".pub")
    _write(path, private, private=True)
    _write(pub, public + b"\n", private=False)
    return path, pub
