"""TlsOptions: MySQL's ssl-mode turned into PyMySQL connect arguments (the handshake itself
is tested against real servers in tests/integration/test_source_tls.py)."""

from __future__ import annotations

import ssl

import pymysql
import pytest

from headwater.binlog.client import SSL_MODES, TlsOptions, _preferred_context
from headwater.config import SSL_MODES as CONFIG_SSL_MODES
from headwater.errors import ConfigError


def test_the_config_and_the_client_know_the_same_modes() -> None:
    assert SSL_MODES == CONFIG_SSL_MODES


def test_disabled_and_preferred_leave_tls_to_pymysql_rules() -> None:
    assert TlsOptions(mode="disabled").connect_args() == {"ssl_disabled": True}
    assert TlsOptions().connect_args() == {}  # PyMySQL's own PREFERRED: TLS when offered


def test_preferred_context_checks_what_pymysqls_own_preferred_mode_checks() -> None:
    # PyMySQL's preferred mode is what it does given no ssl argument; defer_connect builds
    # the connection object (and its context) without touching the network.
    theirs = pymysql.connect(host="127.0.0.1", port=9, defer_connect=True).ctx
    ours = _preferred_context()
    assert ours is _preferred_context()  # made once, shared
    assert (ours.verify_mode, ours.check_hostname) == (ssl.CERT_NONE, False)
    assert (theirs.verify_mode, theirs.check_hostname) == (ssl.CERT_NONE, False)
    assert ours.protocol == theirs.protocol == ssl.PROTOCOL_TLS_CLIENT
    assert ours.options == theirs.options
    assert (ours.minimum_version, ours.maximum_version) == (
        theirs.minimum_version,
        theirs.maximum_version,
    )
    assert [c["name"] for c in ours.get_ciphers()] == [c["name"] for c in theirs.get_ciphers()]
    # The one difference: PyMySQL loads the system CAs it never consults.
    assert ours.get_ca_certs() == []


@pytest.mark.parametrize(
    ("mode", "verify", "hostname"),
    [
        ("required", ssl.CERT_NONE, False),
        ("verify_ca", ssl.CERT_REQUIRED, False),
        ("verify_identity", ssl.CERT_REQUIRED, True),
    ],
)
def test_required_and_up_give_a_context_that_checks_what_the_mode_says(
    mode: str, verify: ssl.VerifyMode, hostname: bool
) -> None:
    ctx = TlsOptions(mode=mode).connect_args()["ssl"]
    assert isinstance(ctx, ssl.SSLContext)
    assert (ctx.verify_mode, ctx.check_hostname) == (verify, hostname)


def test_older_flags_spell_the_verify_modes() -> None:
    assert TlsOptions(verify_cert=True).mode == "verify_ca"
    assert TlsOptions(verify_identity=True).mode == "verify_identity"
    assert TlsOptions(mode="verify_identity", verify_cert=True).mode == "verify_identity"


def test_bad_modes_and_files_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="verify_identity") as e:
        TlsOptions(mode="strict")
    assert e.value.field == "tls.mode"
    with pytest.raises(ConfigError, match="certificate"):
        TlsOptions(key="k.pem")
    with pytest.raises(ConfigError, match=r"CA file /nonexistent/ca\.pem"):
        TlsOptions(mode="verify_ca", ca="/nonexistent/ca.pem").connect_args()
