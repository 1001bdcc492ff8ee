"""The principal of a client that logs in with its TLS certificate: the certificate's
subject as a distinguished name (RFC 2253/4514, as Java's ``X500Principal.getName()``
writes it: ``CN=alice,OU=eng,O=acme``), mapped by ``ssl.principal.mapping.rules``
(Kafka's ``SslPrincipalMapper``).

Rules are tried in order; the first whose pattern matches the whole DN gives the name:

    RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L,RULE:^CN=(.*?)$/$1/,DEFAULT

``$1``... are the pattern's groups; a trailing ``L`` or ``U`` lower- or upper-cases the
result; ``DEFAULT`` is the DN as it is. No rule matching is an error (the connection is
refused), as in Kafka.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from partita.errors import InvalidConfigurationError

# One rule: DEFAULT, or RULE:pattern/replacement/[LU] (a "/" escaped as "\/").
_RULE = re.compile(
    r"\s*(?:(?P<default>DEFAULT)|RULE:(?P<pattern>(?:\\.|[^\\/])*)/"
    r"(?P<replacement>(?:\\.|[^\\/])*)/(?P<case>[LU]?))\s*(?:,|$)"
)


class NoMatchingRuleError(ValueError):
    """No rule maps the DN: Kafka refuses the connection."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        match = self.pattern.fullmatch(dn)
        if match is None:
            return None
        name = self.pattern.sub(self.replacement, dn, count=1)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


@dataclass(frozen=True, slots=True)
class SslPrincipalMapper:
    rules: tuple[_Rule, ...]

    @classmethod
    def from_rules(cls, text: str) -> SslPrincipalMapper:
        text = text.strip() or "DEFAULT"
        rules: list[_Rule] = []
        position = 0
        while position < len(text):
            match = _RULE.match(text, position)
            if match is None or match.end() == position:
                raise InvalidConfigurationError(
                    f"ssl.principal.mapping.rules: cannot read {text[position:]!r} "
                    "(expected RULE:pattern/replacement/[LU] or DEFAULT)"
                )
            position = match.end()
            if match["default"]:
                rules.append(_Rule(None))
                continue
            pattern = match["pattern"].replace("\\/", "/")
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise InvalidConfigurationError(
                    f"ssl.principal.mapping.rules: {pattern!r} is not a pattern: {exc}"
                ) from None
            # Java's $1 group references; a literal backslash or "\" stays one.
            replacement = re.sub(r"\$(\d+)", r"\\\1", match["replacement"].replace("\\/", "/"))
            rules.append(_Rule(compiled, replacement, match["case"]))
        return cls(tuple(rules))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRuleError(f"no ssl.principal.mapping.rules rule matches {dn!r}")


def certificate_dn(der: bytes) -> str:
    """The subject of a DER certificate, as Java's RFC 2253 name."""
    from cryptography import x509  # noqa: PLC0415  (loaded once a client shows a certificate)

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
