"""TLS for the driver's control channel in cluster mode: a key and certificate of this run only.

On a cluster the channel crosses the network and carries what an eavesdropper must not read: the
run's secret, and (shared hosting) each epoch's cloudpickled ``TaskPairSpec``, whose source and sink
configs hold resolved credentials. So the driver makes, at start, an EC P-256 key and a self-signed
certificate that exist nowhere but in its memory (the key touches the disk only encrypted with a
random password, for the few milliseconds ``ssl`` needs to load it, in a 0700 temporary
directory), and ships the SHA-256 of the certificate to the executors inside the control address,
which reaches them the way the secret always did (in Spark's task closures: protect those with
``spark.authenticate`` and ``spark.network.crypto.enabled``). An executor accepts only a server
whose certificate has that digest (pinning: no CA, no host name), then sends the secret inside
TLS 1.3, which authenticates it to the driver. A client speaking plain text gets nothing but a
failed handshake.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import secrets
import socket
import ssl
import tempfile
import time

__all__ = ["ServerTLS", "client_wrap", "handshake", "PinMismatch"]


class PinMismatch(ssl.SSLError):
    """The server's certificate is not the one the driver's address pins."""


class ServerTLS:
    """The driver side: a per-run key and self-signed certificate, and the context serving them."""

    def __init__(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "connect-bridge control channel")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=3650)).sign(key, hashes.SHA256()))
        self.pin = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
        password = secrets.token_bytes(32)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_3
        with tempfile.TemporaryDirectory(prefix="connect-control-") as tmp:  # mkdtemp: 0700
            certfile, keyfile = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
            with open(certfile, "wb") as f:
                f.write(cert.public_bytes(serialization.Encoding.PEM))
            with open(os.open(keyfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.BestAvailableEncryption(password)))
            self.context.load_cert_chain(certfile, keyfile, password=password)


def handshake(sock: ssl.SSLSocket, deadline: float) -> None:
    """Complete the TLS handshake of ``sock`` (wrapped with do_handshake_on_connect=False) by ``deadline`` (monotonic), however
    slowly the peer trickles its bytes; raises OSError (TimeoutError, ssl.SSLError) otherwise."""
    import select

    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        while True:
            try:
                sock.do_handshake()
                return
            except ssl.SSLWantReadError:
                wait = ([sock], [], [])
            except ssl.SSLWantWriteError:
                wait = ([], [sock], [])
            left = deadline - time.monotonic()
            if left <= 0 or not any(select.select(*wait, left)):
                raise TimeoutError("TLS handshake not completed in time")
    finally:
        sock.settimeout(timeout)


def client_wrap(sock: socket.socket, pin: str, timeout: float) -> ssl.SSLSocket:
    """``sock`` wrapped in TLS 1.3 to a server whose certificate's SHA-256 is ``pin``; PinMismatch
    (an OSError) if it is another one."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the pin below is the whole verification: no CA, no host name
    wrapped = context.wrap_socket(sock, do_handshake_on_connect=False)
    try:
        handshake(wrapped, time.monotonic() + timeout)
        cert = wrapped.getpeercert(binary_form=True) or b""
        if not hmac.compare_digest(hashlib.sha256(cert).hexdigest(), pin):
            raise PinMismatch("the driver's control channel presented another certificate than the pinned one")
    except BaseException:
        wrapped.close()
        raise
    return wrapped
