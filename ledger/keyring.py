"""The keys one open ledger works with, and what each one seals or signs.

* the **noise key** (secret): noise seeds, the keyed seal over the chain head
  and the MACs of the domain and release rows;
* the **signing key** (secret, Ed25519): the signature over the chain head;
* the **public key**: checks that signature; all an auditor needs.

An operator's ledger holds all three; an auditor's holds only the public key
(`noise` and `signing` are None) and opens the file read-only.

The keyring also carries what the files *outside* the database say about the
ledger, which verify trusts over anything the database says about itself:
where the public key came from (`source`; the ledger's own ``meta`` table is
never enough on its own), the fingerprints it must have (`pins`: the
``.pin`` file written at init, ``--expect-fingerprint``), the oldest format
those files allow (`floor`: a signing key, public key or pin means signed
heads, schema 3 or later; a head counter file means schema 4) and the head
counter file (`counter_file`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger import keys, signing
from ledger.errors import LedgerIntegrityError


@dataclass(frozen=True)
class Keyring:
    """The keys of one open ledger and the head fields a signature covers.

    Attributes:
        noise: the noise key (None in auditor mode).
        signing: the Ed25519 private key (None in auditor mode, or for a ledger
            of a schema older than 3, which has none yet).
        public: the raw Ed25519 public key (None before schema 3).
        ledger_id: the ledger's id (meta), part of every signed head.
        version: the ledger's schema version (as the file claims it).
        floor: the oldest schema the files outside the database allow (0: any).
        floor_why: which file or option set `floor` (for the message).
        pins: (where, fingerprint) the public key must match.
        source: where the public key came from; `EMBEDDED` when only from the
            ledger's own ``meta`` table (not an independent verification).
        counter_file: the head counter file (`ledger.counter`), None if not used.
    """

    noise: bytes | None
    signing: Ed25519PrivateKey | None
    public: bytes | None
    ledger_id: str
    version: int
    floor: int = 0
    floor_why: str = ""
    pins: tuple[tuple[str, str], ...] = ()
    source: str = ""
    counter_file: Path | None = None

    @property
    def noise_key(self) -> bytes:
        """The noise key; LedgerIntegrityError in auditor mode."""
        if self.noise is None:
            raise LedgerIntegrityError("this needs the ledger's noise key (auditor mode has none)")
        return self.noise

    def seal(self, seq: int, last_hash: str, counter: int = 0) -> str:
        """The keyed seal over the chain head (schema 3: and the version; 4: and the counter)."""
        if self.version >= 4:
            return keys.chain_seal_v3(self.noise_key, self.version, seq, last_hash, counter)
        if self.version >= 3:
            return keys.chain_seal_v2(self.noise_key, self.version, seq, last_hash)
        return keys.chain_seal(self.noise_key, seq, last_hash)

    def sign(self, seq: int, last_hash: str, counter: int = 0) -> str | None:
        """The Ed25519 signature over the chain head (None before schema 3)."""
        if self.signing is None or self.version < 3:
            return None
        return signing.sign_head(self.signing, self.ledger_id, self.version, seq, last_hash,
                                 counter)

    def signature_ok(self, signature: str | None, seq: int, last_hash: str,
                     counter: int | None = None) -> bool:
        """True iff `signature` is the public key's signature over this head."""
        if self.public is None:
            return False
        return signing.head_signature_ok(self.public, signature, self.ledger_id, self.version,
                                         seq, last_hash, counter)


EMBEDDED = "the ledger's own meta table"
"""`Keyring.source` of a public key read from the database itself (never trusted alone)."""
