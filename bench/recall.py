"""Episodic recall: recall@5 and p50 latency at 1k, 10k and 100k episodes, by retrieval method.

    python bench/recall.py            # 1k, 10k, 100k episodes (~2-3 min on 2 cores)
    python bench/recall.py --quick    # 1k and 10k only, fewer questions (~20 s)
    python bench/recall.py --postgres # the same on SQLite and on PostgreSQL, in one run

Then it runs bench/tokens.py (tokens sent per turn over a 500-turn conversation
per memory strategy, against full replay; skip with --no-tokens).

Prints markdown tables on stdout (progress on stderr) and writes the numbers
to bench/results/recall-<timestamp>.json.

The data set is generated deterministically (seeded): people with templated
facts (city, pet, colour, job, sport, food, birthday, car, allergy, instrument),
each stored as one exchange ("User: <fact>\\nAssistant: <acknowledgement>"),
plus small talk that mentions people by name (distractors sharing the name).
Everything sits in ONE partition (one person who has said it all: the worst
case, since recall never leaves a speaker's partition). Each question asks for
one stored fact and is labelled with that episode's id; recall@5 is the share of
questions whose episode is among the five returned. Half the questions are
"close" (they share a content word with the fact, possibly inflected:
"Where did X move to?" / "X moved to ..."), half "paraphrased" (they share
only the person's name: "Which town does X live in now?"), so a bag-of-words
embedder cannot win by word overlap alone.

Methods, all on the same store, index and embedder (hash/384):
- vector:  cosine over the in-memory float32 index only (agentd.memory.vectors)
- keyword: FTS5 bm25 order only (the store's KeywordSearch)
- hybrid:  what agentd recalls with (agentd.memory.episodic.recall_episodes): a normalised
           blend of cosine with an FTS5 keyword score (coverage + relative bm25)
- rrf:     reciprocal rank fusion (k=60) of the vector and bm25 rankings, for comparison
Latency is one recall end to end as the engine runs it: embed the question, one
store read (pending + FTS5), the matrix product, one store read for the texts.
With --postgres every size runs on both stores (PostgreSQL: a throwaway server,
its full-text search in place of FTS5, each size in a database of its own).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _common import log as say  # bench/_common.py: first, it puts the repository root on the path
from _common import write_results

from agentd.memory.keywords import keyword_terms
from agentd.memory.recall import Weights, load_index, recall_episodes
from agentd.memory.vectors import as_blob, index_cache, top_k
from agentd.providers.embedders import HashEmbedder
from agentd.store.base import Store
from agentd.store.postgres import PostgresBackend
from agentd.store.queries import EpisodesById, KeywordSearch
from agentd.store.records import NewEpisode
from agentd.store.sqlite import SqliteStore, StoreExecutor
from agentd.store.writes import InsertEpisodes
from testkit.postgres import PostgresServer

PARTITION = "user:bench"
K = 5
RRF_K = 60
DIM = 384

FIRST = """Alice Bruno Chiara Dmitri Elena Farid Greta Hamid Ines Jonas Keiko Lars Mina Nadia Oskar Priya
Quentin Rosa Samir Tomas Ulla Viktor Wanda Xavier Yusuf Zora Amara Bjorn Celia Dario Esme Felix Gwen Hugo
Ilse Jorge Kasia Leon Maren Nikos Olga Pavel Rania Sven Talia Umar Vera Wim Yara Zeno""".split()
SYLLABLES = "ka lo mi ren tas vo bel dri sun har pe lin gor ma zu fen qui ros dal nek".split()
CITIES = """Lisbon Porto Valencia Lyon Ghent Utrecht Bremen Graz Krakow Brno Turin Bologna Seville Malmo Aarhus
Tallinn Riga Vilnius Gdansk Cork Galway Leeds Bristol Dundee Bergen Tromso Oulu Tampere Basel Lucerne""".split()
PET_KINDS = "cat dog parrot rabbit tortoise hamster ferret goldfish".split()
PET_NAMES = """Biscuit Pepper Mango Nimbus Pickle Juniper Waffles Clover Sprout Tofu Marble Pretzel Nutmeg
Pixel Ziggy Olive Basil Muffin Sable Quill""".split()
COLOURS = "teal crimson ochre lilac navy mustard coral olive amber indigo".split()
JOBS = "nurse architect plumber translator pharmacist geologist baker electrician librarian pilot".split()
COMPANIES = "Norvik Altair Brightwell Calder Dunmore Everly Foxglove Granton Halden Ironbridge".split()
SPORTS = "badminton volleyball squash handball curling fencing rugby cricket lacrosse table-tennis".split()
FOODS = "mushrooms olives coriander anchovies aubergine beetroot liquorice blue-cheese".split()
DISHES = "risotto ramen falafel paella goulash dumplings lasagne tacos curry pierogi".split()
MONTHS = """January February March April May June July August September October November December""".split()
CAR_MAKES = "Volvo Saab Skoda Fiat Renault Peugeot Citroen Dacia Seat Opel".split()
ALLERGENS = "peanuts penicillin shellfish pollen latex sesame wasp-stings cats".split()
INSTRUMENTS = "cello oboe banjo accordion harp trombone ukulele clarinet".split()
ACKS = [
    "Noted, thanks for telling me.",
    "Got it, I will remember that.",
    "Thanks, good to know.",
    "Understood, I have made a note of it.",
    "Interesting, thank you for sharing.",
]
SMALL_TALK = [
    ("I had lunch with {name} today, it was nice.", "Sounds like a pleasant afternoon."),
    ("The weather is grey again, {name} says it will rain all week.", "Bring an umbrella then."),
    ("Can you suggest a quick dinner idea?", "How about a vegetable stir-fry with rice?"),
    ("{name} recommended a podcast about history.", "History podcasts are a great way to learn."),
    ("I need to remember to water the plants.", "A reminder on your phone could help."),
    ("What is a good book for a long train ride?", "A gripping mystery novel works well."),
    ("{name} and I watched a film last night.", "I hope you both enjoyed it."),
    ("My laptop is running slowly again.", "Closing unused programs may help."),
]


@dataclass(frozen=True)
class Attribute:
    name: str
    fact: str
    close: str
    paraphrase: str
    values: Callable[[random.Random], dict[str, str]]


ATTRIBUTES = [
    Attribute(
        "city",
        "{name} moved to {city} last spring for a new job.",
        "Where did {name} move to?",
        "Which town does {name} live in now?",
        lambda r: {"city": r.choice(CITIES)},
    ),
    Attribute(
        "pet",
        "{name} adopted a {kind} named {pet}.",
        "What is the name of the {kind} {name} adopted?",
        "What does {name} call their animal?",
        lambda r: {"kind": r.choice(PET_KINDS), "pet": r.choice(PET_NAMES)},
    ),
    Attribute(
        "colour",
        "{name}'s favourite colour is {colour}.",
        "What is {name}'s favourite colour?",
        "Which shade does {name} like most?",
        lambda r: {"colour": r.choice(COLOURS)},
    ),
    Attribute(
        "job",
        "{name} works as a {job} at a company called {company}.",
        "Where does {name} work?",
        "What does {name} do for a living?",
        lambda r: {"job": r.choice(JOBS), "company": r.choice(COMPANIES)},
    ),
    Attribute(
        "sport",
        "Every weekend {name} plays {sport} with friends.",
        "Which sport does {name} play?",
        "What game is {name} into?",
        lambda r: {"sport": r.choice(SPORTS)},
    ),
    Attribute(
        "food",
        "{name} cannot stand {food} and always orders {dish} instead.",
        "What does {name} always order?",
        "What meal is {name}'s usual choice?",
        lambda r: {"food": r.choice(FOODS), "dish": r.choice(DISHES)},
    ),
    Attribute(
        "birthday",
        "{name}'s birthday is on the {day}th of {month}.",
        "When is {name}'s birthday?",
        "On what date was {name} born?",
        lambda r: {"day": str(r.randint(4, 28)), "month": r.choice(MONTHS)},
    ),
    Attribute(
        "car",
        "{name} drives an old {colour} {make}.",
        "What car does {name} drive?",
        "Which vehicle does {name} own?",
        lambda r: {"colour": r.choice(COLOURS), "make": r.choice(CAR_MAKES)},
    ),
    Attribute(
        "allergy",
        "{name} is allergic to {allergen}, so keep it away.",
        "What is {name} allergic to?",
        "Which thing gives {name} a bad reaction?",
        lambda r: {"allergen": r.choice(ALLERGENS)},
    ),
    Attribute(
        "instrument",
        "{name} has been learning the {instrument} for {years} years.",
        "Which instrument is {name} learning?",
        "What music does {name} practise?",
        lambda r: {"instrument": r.choice(INSTRUMENTS), "years": str(r.randint(2, 9))},
    ),
]


@dataclass(frozen=True)
class Question:
    text: str
    answer: int  # the episode id holding the fact
    style: str  # close | paraphrase


def people(n: int, rng: random.Random) -> list[str]:
    surnames = sorted({"".join(rng.sample(SYLLABLES, 3)).capitalize() for _ in range(400)})
    combos = [f"{f} {s}" for f in FIRST for s in surnames]
    if n > len(combos):
        raise SystemExit(f"not enough distinct names for {n} people")
    return rng.sample(combos, n)


def dataset(size: int, questions: int, seed: int = 4) -> tuple[list[str], list[Question]]:
    """`size` episode texts (ids 1..size in insertion order) and labelled questions about them."""
    rng = random.Random(seed)
    n_facts = int(size * 0.8)
    names = people((n_facts + len(ATTRIBUTES) - 1) // len(ATTRIBUTES), rng)
    facts: list[tuple[str, Attribute, dict[str, str]]] = []
    for name in names:
        for attribute in ATTRIBUTES:
            facts.append((name, attribute, attribute.values(rng)))
    facts = facts[:n_facts]
    entries: list[tuple[str, int | None]] = []  # (text, index into facts)
    for i, (name, attribute, values) in enumerate(facts):
        fact = attribute.fact.format(name=name, **values)
        entries.append((f"User: {fact}\nAssistant: {rng.choice(ACKS)}", i))
    while len(entries) < size:
        said, answer = rng.choice(SMALL_TALK)
        entries.append((f"User: {said.format(name=rng.choice(names))}\nAssistant: {answer}", None))
    rng.shuffle(entries)  # facts and small talk interleaved over time
    texts = [t for t, _ in entries]
    position = {fact: i + 1 for i, (_, fact) in enumerate(entries) if fact is not None}
    asked = []
    for n, fact_index in enumerate(rng.sample(range(len(facts)), questions)):
        name, attribute, values = facts[fact_index]
        style = "close" if n % 2 == 0 else "paraphrase"
        template = attribute.close if style == "close" else attribute.paraphrase
        asked.append(Question(template.format(name=name, **values), position[fact_index], style))
    return texts, asked


# -- methods ------------------------------------------------------------------------------


async def vector_method(store: Store, embedder: HashEmbedder, q: str) -> list[int]:
    recall = await recall_episodes(store, embedder, PARTITION, q, Weights(top_k=K), time.time(), "vector")
    return [r.scored.id for r in recall.episodes]


async def keyword_method(store: Store, embedder: HashEmbedder, q: str) -> list[int]:
    terms = keyword_terms(q)
    if not terms:
        return []
    # the hits carry their texts, as a recall must return them
    return [h.id for h in await store.read(KeywordSearch(PARTITION, embedder.id, terms, K))]


async def hybrid_method(store: Store, embedder: HashEmbedder, q: str) -> list[int]:
    recall = await recall_episodes(store, embedder, PARTITION, q, Weights(top_k=K), time.time())
    return [r.scored.id for r in recall.episodes]


async def rrf_method(store: Store, embedder: HashEmbedder, q: str) -> list[int]:
    """Reciprocal rank fusion of the vector ranking and the bm25 ranking (top 50 of each)."""
    index = await load_index(store, PARTITION, embedder.id)
    query = (await embedder.embed([q]))[0]
    vector_ranked = [i for i, _ in top_k(index.ids, index.cosines(query), 50)]
    terms = keyword_terms(q)
    keyword_ranked = (
        [h.id for h in await store.read(KeywordSearch(PARTITION, embedder.id, terms, 50))] if terms else []
    )
    fused: dict[int, float] = {}
    for ranking in (vector_ranked, keyword_ranked):
        for rank, episode_id in enumerate(ranking):
            fused[episode_id] = fused.get(episode_id, 0.0) + 1.0 / (RRF_K + rank + 1)
    best = sorted(fused, key=lambda i: fused[i], reverse=True)[:K]
    await store.read(EpisodesById(best))
    return best


METHODS: dict[str, Callable[[Store, HashEmbedder, str], Awaitable[list[int]]]] = {
    "vector": vector_method,
    "keyword": keyword_method,
    "hybrid": hybrid_method,
    "rrf": rrf_method,
}


# -- running ------------------------------------------------------------------------------


async def one_size(
    size: int, n_questions: int, store: Store, backend: str, settle: Callable[[], object] = lambda: None
) -> dict[str, Any]:
    texts, questions = dataset(size, n_questions)
    embedder = HashEmbedder(DIM)
    t0 = time.perf_counter()
    vectors = [as_blob(embedder.embed_one(t)) for t in texts]
    embed_s = time.perf_counter() - t0
    await store.open()
    base = time.time() - size * 60.0
    rows = [
        NewEpisode(PARTITION, "bench", t, base + i * 60.0, 1.0, None, embedder.id, v)
        for i, (t, v) in enumerate(zip(texts, vectors, strict=True))
    ]
    t0 = time.perf_counter()
    (ids,) = await store.write(InsertEpisodes(rows))  # one transaction
    insert_s = time.perf_counter() - t0
    assert ids == list(range(1, size + 1))
    settle()
    t0 = time.perf_counter()
    index = await load_index(store, PARTITION, embedder.id)
    load_s = time.perf_counter() - t0
    say(
        f"{size} ({backend}): embedded in {embed_s:.1f}s, inserted in {insert_s:.1f}s,"
        f" index loaded in {load_s:.2f}s"
    )
    result: dict[str, Any] = {
        "store": backend,
        "episodes": size,
        "questions": len(questions),
        "embed_s": embed_s,
        "insert_s": insert_s,
        "index_load_s": load_s,
        "index_rows": index.size,
        "methods": {},
    }
    for name, method in METHODS.items():
        await method(store, embedder, questions[0].text)  # warm
        hits = {"close": 0, "paraphrase": 0}
        latencies = []
        for q in questions:
            t0 = time.perf_counter()
            found = await method(store, embedder, q.text)
            latencies.append((time.perf_counter() - t0) * 1000)
            hits[q.style] += q.answer in found
        styles = {s: sum(1 for q in questions if q.style == s) for s in hits}
        result["methods"][name] = {
            "recall_at_5": sum(hits.values()) / len(questions),
            "recall_close": hits["close"] / max(1, styles["close"]),
            "recall_paraphrase": hits["paraphrase"] / max(1, styles["paraphrase"]),
            "p50_ms": statistics.median(latencies),
            "p95_ms": float(np.percentile(latencies, 95)),
        }
        say(f"  {name}: {result['methods'][name]}")
    await store.close()
    index_cache(store)  # (the cache goes with the store object)
    return result


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| episodes | store | method | recall@5 | close | paraphrased | p50 ms | p95 ms |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for name, m in r["methods"].items():
            lines.append(
                f"| {r['episodes']:,} | {r['store']} | {name} | {m['recall_at_5']:.2f} | {m['recall_close']:.2f} | "
                f"{m['recall_paraphrase']:.2f} | {m['p50_ms']:.1f} | {m['p95_ms']:.1f} |"
            )
    lines += [
        "",
        "| episodes | store | questions | embed (hash/384, pure Python) s | insert (one transaction) s | index load s |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['episodes']:,} | {r['store']} | {r['questions']} | {r['embed_s']:.1f} | {r['insert_s']:.1f} | "
            f"{r['index_load_s']:.2f} |"
        )
    return "\n".join(lines)


async def run(args: argparse.Namespace, postgres: PostgresServer | None) -> list[dict[str, Any]]:
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    n_questions = 100 if args.quick else 300
    results = []
    executor = StoreExecutor()
    try:
        with tempfile.TemporaryDirectory(prefix="agentd-recall-") as tmp:
            for size in sizes:
                store = SqliteStore(Path(tmp) / f"recall-{size}.sqlite", executor)
                results.append(await one_size(size, n_questions, store, "sqlite"))
                if postgres is None:
                    continue
                database = f"recall_{size}"
                url = postgres.create_database(database)
                async with PostgresBackend(url, daemon="bench") as backend:
                    # (after a bulk load the planner has no statistics until autovacuum's ANALYZE,
                    # within a minute; the questions are timed as a database that is in use runs them)
                    store = backend.store("bench")
                    results.append(
                        await one_size(
                            size,
                            n_questions,
                            store,
                            "postgresql",
                            functools.partial(postgres.psql, "ANALYZE", database),
                        )
                    )
                postgres.drop_database(database)
    finally:
        executor.shutdown()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1k and 10k episodes, 100 questions")
    ap.add_argument(
        "--no-tokens", action="store_true", help="skip the tokens-per-turn table (bench/tokens.py)"
    )
    ap.add_argument(
        "--postgres", action="store_true", help="every size on PostgreSQL too (a throwaway server)"
    )
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        # (started here, in the main thread, which outlives it: testkit/postgres.py)
        postgres = stack.enter_context(PostgresServer()) if args.postgres else None
        results = asyncio.run(run(args, postgres))
    print(table(results))
    if not args.no_tokens:
        # The second half: tokens sent per turn over a 500-turn conversation, per strategy.
        subprocess.run(
            [sys.executable, str(Path(__file__).with_name("tokens.py")), "--turns", "500"], check=True
        )
    path = write_results("recall", {"quick": args.quick, "numpy": np.__version__, "results": results})
    say(f"wrote {path}")


if __name__ == "__main__":
    main()
