"""Seeded data for benchmarks/memory.py: a labelled recall set and a large synthetic corpus.

The recall set plants, for each of N made-up services, one fact per relation (region, owner,
database, ...) plus two log-like steps that name the service. A question asks for one
(service, relation) in other words than the fact ("Which cloud location serves X?" for
"X runs in the eu-west-3 region."). The service name is shared with ten other episodes,
so the relation has to be understood, not just the name matched: those ten are the hard
negatives.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SYLLABLES = "ka lo mi ran tu vex zor pel dri fan gor hul ist jen kor lum nar ost pry qua sil tem ul vor wen yas".split()
KINDS_OF_SERVICE = "billing auth search ledger notify gateway reports export ingest payroll".split()
REGIONS = ["eu-west-3", "us-east-2", "ap-south-1", "ca-central-1", "sa-east-1", "eu-north-1"]
PEOPLE = ["Dana Ortiz", "Malik Chen", "Priya Nair", "Tomasz Wolny", "Aiko Sato", "Lena Brandt", "Omar Haddad"]
DATABASES = ["PostgreSQL", "Cassandra", "DynamoDB", "MongoDB", "Redis", "ClickHouse"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
LANGUAGES = ["Rust", "Go", "Kotlin", "Elixir", "TypeScript", "Python"]
CHANNELS = ["#ops-red", "#pager-blue", "#sre-alerts", "#oncall-core", "#incidents-eu"]

# relation: (values, fact template, question paraphrases). The questions avoid the fact's wording.
RELATIONS: dict[str, tuple[list[str], str, list[str]]] = {
    "region": (
        REGIONS,
        "{e} runs in the {v} region.",
        ["Which cloud location serves {e}?", "Where is {e} hosted geographically?"],
    ),
    "owner": (
        PEOPLE,
        "{v} owns the {e} service.",
        ["Who is responsible for {e}?", "Which engineer maintains {e}?"],
    ),
    "database": (
        DATABASES,
        "{e} stores its data in {v}.",
        ["What database backs {e}?", "Which datastore does {e} persist records to?"],
    ),
    "port": (
        [str(p) for p in (8080, 9090, 7443, 5000, 6060)],
        "{e} listens on port {v}.",
        ["Which TCP port do I connect to for {e}?", "What socket number does {e} accept connections on?"],
    ),
    "release": (
        DAYS,
        "Deployments of {e} happen on {v}.",
        ["What day of the week is {e} shipped?", "When does {e} get released to production?"],
    ),
    "language": (
        LANGUAGES,
        "{e} is written in {v}.",
        ["Which programming language is the {e} codebase in?", "What language was {e} implemented with?"],
    ),
    "alerts": (
        CHANNELS,
        "Alerts for {e} go to the {v} Slack channel.",
        ["Where are {e} incidents reported?", "Which chat room pages people when {e} breaks?"],
    ),
    "ratelimit": (
        [str(n) for n in (50, 200, 1000, 5000)],
        "{e} allows at most {v} requests per second.",
        ["What is the throughput cap of {e}?", "How much traffic can {e} take before throttling?"],
    ),
}
LOG_LINES = [
    "Restarted {e} after a config change.",
    "Read the latest error logs of {e}.",
    "Ran the integration tests of {e}; 3 were flaky.",
    "Opened a pull request against {e}.",
]


@dataclass(frozen=True)
class Planted:
    texts: list[str]  # every episode text, facts and steps
    kinds: list[str]
    questions: list[tuple[str, int]]  # (question, index in texts of the one fact that answers it)


def service_names(rng: random.Random, n: int) -> list[str]:
    names: set[str] = set()
    while len(names) < n:
        names.add(f"{rng.choice(SYLLABLES)}{rng.choice(SYLLABLES)}-{rng.choice(KINDS_OF_SERVICE)}")
    return sorted(names)


def planted_set(seed: int, pairs: int = 100) -> Planted:
    rng = random.Random(seed)
    texts: list[str] = []
    kinds: list[str] = []
    questions: list[tuple[str, int]] = []
    for name in service_names(rng, pairs):
        fact_at: dict[str, int] = {}
        for relation, (values, template, _) in RELATIONS.items():
            fact_at[relation] = len(texts)
            texts.append(template.format(e=name, v=rng.choice(values)))
            kinds.append("fact")
        for line in rng.sample(LOG_LINES, 2):
            texts.append(line.format(e=name))
            kinds.append("step")
        relation = rng.choice(sorted(RELATIONS))
        questions.append((rng.choice(RELATIONS[relation][2]).format(e=name), fact_at[relation]))
    return Planted(texts=texts, kinds=kinds, questions=questions)


def corpus(seed: int, n: int) -> list[str]:
    """n log-like episode texts over a 3,000-word synthetic vocabulary with a Zipf-like skew."""
    rng = random.Random(seed)
    vocab = sorted({"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(6000)})[:3000]
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    out = []
    for i in range(n):
        words = rng.choices(vocab, weights=weights, k=rng.randint(6, 18))
        out.append(f"step {i}: " + " ".join(words))
    return out


def queries(seed: int, n: int) -> list[str]:
    rng = random.Random(seed + 1)
    base = corpus(seed + 2, n)
    return [" ".join(rng.sample(text.split()[2:], k=min(4, len(text.split()) - 2))) for text in base]
