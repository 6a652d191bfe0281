"""News-like text for the synthetic datasets: readable, varied, deterministic, built in.

Sentences are assembled from templates and a modest vocabulary (names, organisations, places,
numbers, dates), so no download is needed and the same seed always gives the same text.
`iter_entries` yields the `output` of each entry of a dataset shape, one at a time.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Iterator

from ado_actuators.sfttrainer.catalog import datasets

# ----------------------------------------------------------------------------------------
# Vocabulary. Every word of every sentence contains a letter or a digit (checked when the
# pool is built): the token guarantee below counts on no word vanishing in a tokenizer.
# ----------------------------------------------------------------------------------------

_FIRST = [
    "Maria",
    "James",
    "Aisha",
    "Wei",
    "Carlos",
    "Ingrid",
    "Kwame",
    "Sofia",
    "Daniel",
    "Priya",
    "Tomas",
    "Hannah",
    "Yusuf",
    "Elena",
    "Oliver",
    "Mei",
    "Rafael",
    "Nadia",
    "Samuel",
    "Chloe",
    "Arjun",
    "Leila",
    "Victor",
    "Grace",
    "Mateo",
    "Anika",
    "Henrik",
    "Fatima",
    "Lucas",
    "Zoe",
    "Ibrahim",
    "Astrid",
    "Diego",
    "Keiko",
    "Patrick",
    "Amara",
]
_LAST = [
    "Alvarez",
    "Okafor",
    "Chen",
    "Novak",
    "Schmidt",
    "Haddad",
    "Rossi",
    "Tanaka",
    "Kowalski",
    "Mensah",
    "Dubois",
    "Patel",
    "Larsen",
    "Moreau",
    "Silva",
    "Brennan",
    "Ivanova",
    "Nakamura",
    "Fischer",
    "Costa",
    "Oduya",
    "Lindqvist",
    "Romero",
    "Hughes",
    "Takahashi",
    "Bianchi",
    "Kaur",
    "Jensen",
    "Mbeki",
    "Walsh",
    "Herrera",
    "Virtanen",
    "Osei",
    "Byrne",
]
_TITLES = (
    "the finance minister",
    "a senior analyst",
    "the mayor",
    "a spokesperson",
    "the chief executive",
    "a union leader",
    "the committee chair",
    "an economist",
    "the police chief",
    "a local councillor",
    "the head of research",
    "a government adviser",
    "the director",
    "a deputy minister",
    "the chief economist",
    "a senior engineer",
)
_ORGS = (
    "the central bank",
    "the city council",
    "the Ministry of Transport",
    "Northwind Energy",
    "the port authority",
    "the national statistics office",
    "Harbor Logistics",
    "the regional health board",
    "Meridian Bank",
    "the teachers union",
    "Atlas Motors",
    "the weather service",
    "the university hospital",
    "the consumer watchdog",
    "Blue River Foods",
    "the airport operator",
    "the Ministry of Finance",
    "Solace Telecom",
    "the water utility",
    "the chamber of commerce",
    "Granite Construction",
    "the rail operator",
)
_COMPANIES = (
    "Northwind Energy",
    "Meridian Bank",
    "Atlas Motors",
    "Blue River Foods",
    "Solace Telecom",
    "Granite Construction",
    "Harbor Logistics",
    "Vantage Pharma",
    "Crescent Airlines",
    "Oakfield Retail",
)
_PLACES = (
    "Lisbon",
    "Nairobi",
    "Osaka",
    "Toronto",
    "Krakow",
    "Valparaiso",
    "Rotterdam",
    "Chennai",
    "Melbourne",
    "Marseille",
    "Bergen",
    "Accra",
    "Denver",
    "Leipzig",
    "Cebu",
    "Montevideo",
    "Tallinn",
    "Halifax",
    "Porto",
    "Adelaide",
    "the northern provinces",
    "the coastal region",
    "the capital",
    "the river valley",
    "the eastern suburbs",
    "the old town",
)
_TOPICS = (
    "housing prices",
    "the rail strike",
    "water rationing",
    "the new stadium",
    "electricity tariffs",
    "the school reform",
    "fuel costs",
    "the budget deficit",
    "flood defences",
    "hospital waiting lists",
    "the tech sector",
    "grain exports",
    "tourism numbers",
    "the bridge repairs",
    "wind farm plans",
    "public transport fares",
    "the trade agreement",
    "wage talks",
    "air quality",
    "coastal erosion",
    "rent controls",
    "the pension reform",
    "food prices",
    "the harbour expansion",
    "broadband coverage",
)
_GROUPS = (
    "households",
    "investors",
    "commuters",
    "farmers",
    "small businesses",
    "voters",
    "patients",
    "students",
    "exporters",
    "residents",
    "drivers",
    "tenants",
    "retailers",
    "nurses",
    "workers",
    "pensioners",
    "fishermen",
    "shop owners",
)
_GOODS = ("wheat", "coffee", "copper", "timber", "wine", "steel", "cotton", "salmon", "rice")
_VERBS = (
    "announced",
    "confirmed",
    "rejected",
    "welcomed",
    "criticised",
    "approved",
    "delayed",
    "postponed",
    "proposed",
    "questioned",
    "defended",
    "unveiled",
    "revised",
    "backed",
)
_ADJS = (
    "sharp",
    "modest",
    "unexpected",
    "steady",
    "record",
    "gradual",
    "significant",
    "slight",
    "temporary",
    "sustained",
    "surprising",
    "widespread",
    "welcome",
    "worrying",
)
_TRENDS = (
    "rose",
    "fell",
    "climbed",
    "dropped",
    "edged up",
    "slipped",
    "jumped",
    "declined",
    "recovered",
    "stalled",
    "doubled",
    "rebounded",
)
_MOVES = ("rose", "fell", "climbed", "dropped", "jumped", "slipped", "gained", "lost")
_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_ORDINALS = ("second", "third", "fourth", "fifth", "sixth")
_QUARTERS = ("first", "second", "third", "fourth")


def _time(rng: random.Random) -> str:
    r = rng.randrange(6)
    if r == 0:
        return f"on {rng.choice(_DAYS)}"
    if r == 1:
        return f"in {rng.choice(_MONTHS)}"
    if r == 2:
        return f"late on {rng.choice(_DAYS)}"
    if r == 3:
        return f"at the end of {rng.choice(_MONTHS)}"
    return rng.choice(("last week", "earlier this month", "this morning", "over the weekend"))


def _money(rng: random.Random) -> str:
    amount = f"{rng.randint(20, 79)}.{rng.randint(0, 9)}"
    unit = rng.choice(("million", "billion"))
    return rng.choice((f"${amount} {unit}", f"{amount} {unit} euros", f"{amount} {unit} pounds"))


_SLOTS: dict[str, Callable[[random.Random], str]] = {
    "name": lambda r: f"{r.choice(_FIRST)} {r.choice(_LAST)}",
    "title": lambda r: r.choice(_TITLES),
    "org": lambda r: r.choice(_ORGS),
    "org2": lambda r: r.choice(_ORGS),
    "company": lambda r: r.choice(_COMPANIES),
    "place": lambda r: r.choice(_PLACES),
    "topic": lambda r: r.choice(_TOPICS),
    "group": lambda r: r.choice(_GROUPS),
    "goods": lambda r: r.choice(_GOODS),
    "verb": lambda r: r.choice(_VERBS),
    "adj": lambda r: r.choice(_ADJS),
    "trend": lambda r: r.choice(_TRENDS),
    "move": lambda r: r.choice(_MOVES),
    "month": lambda r: r.choice(_MONTHS),
    "time": _time,
    "money": _money,
    "spend": lambda r: f"${r.randint(12, 480) * 5:,}",
    "pct": lambda r: f"{r.randint(1, 40)}.{r.randint(0, 9)}",
    "count": lambda r: f"{r.randint(2, 95) * 50:,}",
    "small": lambda r: str(r.randint(2, 12)),
    "year": lambda r: str(r.randint(1998, 2025)),
    "day": lambda r: str(r.randint(1, 28)),
    "votes": lambda r: str(r.randint(160, 320)),
    "votes2": lambda r: str(r.randint(20, 150)),
    "age": lambda r: str(r.randint(23, 78)),
    "ordinal": lambda r: r.choice(_ORDINALS),
    "quarter": lambda r: r.choice(_QUARTERS),
    "tonnes": lambda r: f"{r.randint(12, 980) * 1000:,}",
}

_SENTENCES = (
    "{org} {verb} a plan {time} to address {topic} in {place}.",
    "{name}, {title} of {org}, said the decision would affect thousands of {group}.",
    "According to {org}, {topic} {move} by {pct} per cent in {month}, the biggest monthly "
    "change since {year}.",
    '"We have to act now," said {name}, who has followed {topic} for {small} years.',
    "The figures, published {time}, show that {group} in {place} spent an average of "
    "{spend} a month on {topic}.",
    "Critics argued that the proposal did little for {group}, while supporters pointed to a "
    "{adj} improvement in {topic}.",
    "{name} told reporters in {place} that talks with {org} would resume {time}.",
    "Officials expect a decision on {topic} before {month} {day}, {year}.",
    "In {place}, about {count} {group} gathered outside the offices of {org} {time}.",
    "The cost of the project has risen to {money}, {pct} per cent more than first estimated.",
    "Analysts at {org} said the {adj} shift in {topic} was likely to continue into {year}.",
    "Local media reported that {count} {group} had signed a petition against the plan.",
    "{org} declined to comment on the report, citing ongoing discussions with {org2}.",
    "The measure passed by {votes} votes to {votes2} after a debate that lasted {small} hours.",
    "Residents of {place} said they had noticed the effects of {topic} within weeks.",
    "A survey of {count} {group} found that {pct} per cent were worried about {topic}.",
    '{name} of {org} described the outcome as "a {adj} step in the right direction".',
    "Shares in {company} {move} {pct} per cent in early trading {time}.",
    "The government has promised to publish a full review of {topic} by {month}.",
    "It was the {ordinal} time this year that {org} had {verb} a change to {topic}.",
    "Meanwhile, {group} in {place} face {adj} delays as work on {topic} continues.",
    "{name}, a {age}-year-old teacher from {place}, said the changes came too late.",
    "Forecasters warned of {adj} rain across {place} {time}, with up to {small}0 millimetres "
    "expected.",
    "The report recommends that {org} set aside {money} each year for {topic}.",
    "Turnout in {place} reached {pct} per cent, the highest since {year}.",
    "Police in {place} said {small} people were questioned after the incident {time}.",
    "Exports of {goods} from {place} {trend} to {tonnes} tonnes in the {quarter} quarter.",
    "{name} said the team would present its findings to {org} {time}.",
    "{company} {verb} a {money} investment in {place}, creating about {count} jobs.",
    "Asked about {topic}, {name} said only that every option remained on the table.",
    "The opposition called for an inquiry into the handling of {topic} by {org}.",
    "Prices for {goods} {trend} for the {ordinal} month in a row, traders in {place} said.",
)

# Short sentences that close the gap at the end of an exact-length (chars) text.
_SHORT_SENTENCES = (
    "Talks resume {time}.",
    "A vote is due in {month}.",
    "{name} declined to comment.",
    "Prices {trend} again.",
    "More details are expected soon.",
    "{org} agreed.",
    "Officials were not available.",
    "Trading was quiet.",
    "Markets {trend}.",
    "Turnout was low.",
    "No date was set.",
    "Reporting by {name}.",
    "The plan stands.",
    "Work begins in {month}.",
    "Few were surprised.",
    "{place} waits.",
    "Costs {trend}.",
    "Both sides agreed.",
    "Union leaders objected.",
    "The review continues.",
    "Crowds gathered in {place}.",
    "Nobody was hurt.",
    "Figures follow in {month}.",
)

_INSTRUCTIONS = (
    "Write a detailed report on {topic} in {place} from the notes below, quoting {name}.",
    "Using the article below as background, write a long feature on {topic} for readers in "
    "{place}.",
    "Continue the story below about {topic}, adding reactions from {group} and officials in "
    "{place}.",
    "Summarise the developments on {topic} described below, then expand them into a full report.",
    "Rewrite the article below as a wire story on {topic}, keeping every name and figure.",
    "Write a follow-up report on {topic} in {place} based on the notes below.",
)
_STYLE_NOTES = (
    "Keep it factual.",
    "Use short paragraphs.",
    "Quote at least two sources.",
    "Avoid speculation.",
    "Include all figures.",
    "Write for a general audience.",
    "Mention the dates.",
    "Keep the tone neutral.",
    "Explain the background briefly.",
    "Be brief.",
    "Cite sources.",
    "No opinions.",
    "Use plain words.",
    "Add a headline.",
    "Name the officials involved.",
    "Give exact numbers.",
    "End with the outlook.",
)

# Lower-case words by length, for the exact-length tail of chars entries (all lengths 1..12).
_FILLER = [
    "a",
    "of",
    "in",
    "on",
    "to",
    "by",
    "at",
    "tax",
    "new",
    "job",
    "one",
    "bank",
    "city",
    "rail",
    "port",
    "plan",
    "rent",
    "price",
    "water",
    "local",
    "trade",
    "board",
    "union",
    "budget",
    "market",
    "report",
    "energy",
    "region",
    "policy",
    "council",
    "economy",
    "housing",
    "figures",
    "pension",
    "minister",
    "industry",
    "district",
    "transport",
    "officials",
    "community",
    "committee",
    "government",
    "investment",
    "commission",
    "residents",
    "authorities",
    "development",
    "electricity",
    "construction",
    "announcement",
    "spokesperson",
]
_FILLER_BY_LEN: dict[int, tuple[str, ...]] = {
    n: tuple(w for w in _FILLER if len(w) == n) for n in range(1, 13)
}
_FILLER_MAX = max(_FILLER_BY_LEN)
assert all(_FILLER_BY_LEN.values()), "every filler length needs a word"

#: Sentences in the shared pool each entry draws from (built once per seed, ~4 MB).
POOL_SIZE = 32768
#: Shortest --chars accepted (the exact-length filler needs a little room).
MIN_CHARS = 16


_A_BEFORE_VOWEL = re.compile(r"\b([Aa]) ([aeiou])")


def _fill_template(rng: random.Random, template: str) -> str:
    text = _A_BEFORE_VOWEL.sub(r"\1n \2", template.format_map(_LazySlots(rng)))
    return text[0].upper() + text[1:]


class _LazySlots(dict):
    """`str.format_map` mapping that draws each slot's value when the template asks for it."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng

    def __missing__(self, key: str) -> str:
        value = self[key] = _SLOTS[key](self.rng)
        return value


class _Pool:
    """A seeded pool of sentences with their word counts; entries are sampled from it."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"sfttrainer-text-pool:{seed}")
        raw = [rng.choice(_SENTENCES).format_map(_LazySlots(rng)) for _ in range(POOL_SIZE)]
        text = _A_BEFORE_VOWEL.sub(r"\1n \2", "\n".join(s[0].upper() + s[1:] for s in raw))
        # The token guarantee relies on every word holding a letter or digit (see
        # response_words); the templates are fixed, so this can only fail on an edit.
        if bad := _WORD_WITHOUT_ALNUM.search(text):
            raise AssertionError(f"sentence pool has a word without letters: {bad[0]!r}")
        self.sentences = text.split("\n")
        self.words = [len(s.split()) for s in self.sentences]
        # Paragraph breaks after roughly one sentence in five, fixed per pool sentence.
        self.separators = [" " if rng.random() >= 0.2 else "\n\n" for _ in self.sentences]
        self.mean_words = sum(self.words) / len(self.words)
        self.indices = range(len(self.sentences))


_WORD_WITHOUT_ALNUM = re.compile(r"(?<!\S)[^\sA-Za-z0-9]+(?!\S)")


@functools.lru_cache(maxsize=2)
def sentence_pool(seed: int) -> _Pool:
    return _Pool(seed)


def _fit_chars(
    rng: random.Random, n: int, pick: Callable[[], str], pick_short: Callable[[], str]
) -> str:
    """Text of exactly `n` (>= MIN_CHARS) characters: whole sentences from `pick`, then
    short ones from `pick_short` into the gap, then a few filler words ending with a full
    stop to land on the exact length."""
    parts: list[str] = []
    length = 0
    for source, tries in ((pick, 8), (pick_short, 24)):
        misses = 0
        while misses < tries and length < n:
            sentence = source()
            grown = length + (1 if parts else 0) + len(sentence)
            # Leave either nothing or >= 3 characters (room for " a.") for the tail.
            if grown == n or grown <= n - 3:
                parts.append(sentence)
                length = grown
            else:
                misses += 1
    rest = n - length
    tail: list[str] = []
    sep = 1 if parts else 0
    while rest > 0:
        if rest - sep - 1 <= _FILLER_MAX:  # the last word, with its full stop
            word = rng.choice(_FILLER_BY_LEN[rest - sep - 1]) + "."
        else:
            limit = min(_FILLER_MAX, rest - sep - 3)
            word = rng.choice(_FILLER_BY_LEN[rng.randint(min(3, limit), min(8, limit))])
        tail.append(word)
        rest -= sep + len(word)
        sep = 1
    if tail:
        tail[0] = tail[0][0].upper() + tail[0][1:]
        parts.append(" ".join(tail))
    text = " ".join(parts)
    assert len(text) == n, (len(text), n)
    return text


def response_words(rng: random.Random, pool: _Pool, min_words: int) -> str:
    """Prose of at least `min_words` whitespace-separated words.

    Why N words give at least N tokens with ANY subword tokenizer (BPE, byte-level BPE,
    WordPiece, SentencePiece BPE/unigram as used by granite, llama and friends):
    - words are separated by single spaces (or a paragraph break), and subword tokenizers
      never produce a token that spans a space: byte-level BPE (GPT-2/granite) and WordPiece
      split the text at whitespace before the model runs (pre-tokenization), and
      SentencePiece models (llama) are trained with split_by_whitespace, so no piece
      contains "▁" (the space) anywhere but at its start -- a piece can begin at most one
      word;
    - every word contains a letter or digit, so no normalizer can erase it and it yields at
      least one token (an unknown word still yields one [UNK]); punctuation attached to a
      word can only split off into extra tokens.
    Hence tokens >= words, and the response alone carries the guarantee; the prompt in
    front of it (instruction + article, ~100 words) and any BOS/EOS tokens are margin.
    No extra margin on the response: with a whitespace-respecting tokenizer the bound
    holds exactly (tests/integration/test_dataset_tokens_guarantee.py sees ~1.1 tokens per
    word with tokenizers trained on this very text), and against a tokenizer trained to
    merge across spaces (SentencePiece with split_by_whitespace=false) no fixed margin
    would do -- such a tokenizer can pack several words into one token.
    """
    out: list[str] = []
    words = 0
    sentences, counts, separators = pool.sentences, pool.words, pool.separators
    while words < min_words:
        batch = rng.choices(pool.indices, k=int((min_words - words) / pool.mean_words) + 1)
        for j in batch:
            out.append(sentences[j])
            out.append(separators[j])
            words += counts[j]
            if words >= min_words:
                break
    out.pop()  # no separator after the last sentence
    return "".join(out)


def _entry_tokens(rng: random.Random, pool: _Pool, min_tokens: int) -> str:
    instruction = _fill_template(rng, rng.choice(_INSTRUCTIONS))
    article = " ".join(rng.choice(pool.sentences) for _ in range(rng.randint(3, 6)))
    response = response_words(rng, pool, min_tokens)
    return f"### Input: {instruction}\n{article}\n\n### Response: {response}"


def _entry_chars(rng: random.Random, pool: _Pool, chars: int) -> str:
    first = [True]

    def pick_instruction() -> str:
        if first[0]:
            first[0] = False
            for _ in range(64):  # one that fits, with room for a style note or two
                text = _fill_template(rng, rng.choice(_INSTRUCTIONS))
                if len(text) <= datasets.PROMPT_CHARS - 12:
                    return text
        return rng.choice(_STYLE_NOTES)

    def pick_style_note() -> str:
        return rng.choice(_STYLE_NOTES)

    def pick_sentence() -> str:
        return rng.choice(pool.sentences)

    def pick_short() -> str:
        return _fill_template(rng, rng.choice(_SHORT_SENTENCES))

    instruction = _fit_chars(rng, datasets.PROMPT_CHARS, pick_instruction, pick_style_note)
    article = _fit_chars(rng, chars, pick_sentence, pick_short)
    response = _fit_chars(rng, chars, pick_sentence, pick_short)
    return f"### Input: {instruction}\n{article}\n\n### Response: {response}"


def iter_entries(
    shape: datasets.DatasetShape,
    *,
    entries: int,
    seed: int = 0,
    min_tokens: int | None = None,
    chars: int | None = None,
) -> Iterator[str]:
    """The `output` text of each entry, one at a time. Entry i depends only on (seed, i, the
    length), so a smaller --entries gives a prefix of the bigger file."""
    pool = sentence_pool(seed)
    for i in range(entries):
        rng = random.Random(f"sfttrainer-text-entry:{seed}:{i}")
        if shape.length_unit == "tokens":
            yield _entry_tokens(rng, pool, min_tokens or shape.min_tokens or 0)
        else:
            yield _entry_chars(rng, pool, chars or shape.chars or 0)
