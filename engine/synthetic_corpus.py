"""The training text for synthetic vocabularies, generated from a seed (nothing is downloaded).

A mix shaped like a coding assistant's traffic: English prose, Python/JavaScript/shell/JSON
snippets with real indentation, numbers, several scripts (Latin with accents, Cyrillic, Greek,
CJK, Korean, Arabic, Devanagari with combining marks), emoji and whitespace runs. The seed
changes word choice and frequencies, and therefore which merges the BPE trainer learns.
"""

from __future__ import annotations

import random
from itertools import accumulate


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


ENGLISH_WORDS = _words(
    "the of and to in is you that it he was for on are as with his they at be this have from "
    "or one had by word but not what all were we when your can said there use an each which "
    "she do how their if will up other about out many then them these so some her would make "
    "like him into time has look two more write go see number no way could people my than "
    "first water been call who oil its now find long down day did get come made may part "
    "function return value error file line model token engine agent server request response "
    "build test check parse render stream cache memory state layer weight batch slot draft "
    "because however although without between another important different following example"
)

UNICODE_WORDS = _words(
    "café naïve résumé über straße Grüße façade señor niño coração ação déjà "
    "привет мир спасибо данные модель работа "
    "καλημέρα κόσμος λόγος "
    "你好 世界 模型 数据 代码 服务器 中文 测试 "
    "こんにちは 世界 ありがとう カタカナ ひらがな "
    "안녕하세요 세계 데이터 "
    "مرحبا عالم بيانات "
    "नमस्ते दुनिया हिन्दी "
    "e\u0301cole n\u0303 a\u0308 o\u0302 "
    "😀 🚀 👍🏽 👨\u200d👩\u200d👧 ❤️ 🇩🇪 ✅ …"
)

CODE_SNIPPETS = (
    "def {name}(self, {arg}: int) -> list[str]:\n    return [str(x) for x in range({arg})]\n",
    'for i in range({num}):\n\tif i % 2 == 0:\n\t\tprint(f"{{i}} is even")\n',
    "class {Name}:\n    def __init__(self) -> None:\n        self.{name} = {{}}\n",
    "const {name} = async ({arg}) => {{\n  const res = await fetch(`/api/${{{arg}}}`);\n  return res.json();\n}};\n",
    'if [ -f "$HOME/.{name}rc" ]; then\n  source "$HOME/.{name}rc" && echo ok || exit 1\nfi\n',
    '{{"{name}": {num}, "{arg}": [1, 2, 3], "ok": true, "path": "/tmp/{name}.txt"}}\n',
    "fn {name}({arg}: &str) -> Result<Vec<u8>, Error> {{\n    Ok({arg}.as_bytes().to_vec())\n}}\n",
    "SELECT {name}, COUNT(*) FROM {arg} WHERE id >= {num} GROUP BY {name};\n",
    "<tool_call>\n<function={name}>\n<parameter={arg}>\n{num}\n</parameter>\n</function>\n</tool_call>\n",
    "    # TODO({name}): handle the {arg} == {num} case\n    raise ValueError('bad {arg}')\n",
)

IDENTIFIERS = _words(
    "data items count index result config path buffer tokens logits hidden state user_id "
    "max_len num_heads head_dim kv_cache seq_len"
)


SYLLABLES = _words(
    "ka to ri sen mal ve dor an is ple tra gon fi mu sha qua lex ber cen dra el fo gri hul "
    "in jo kra lun mor nes ob pra quin ros sta tur ul vin wex yor zel ath ion ment ing ed er"
)


def corpus_lines(seed: int, n_lines: int = 12000) -> list[str]:
    """Deterministic training lines for `seed`."""
    rng = random.Random(seed)
    # A per-seed Zipf-like weighting over real and made-up words so different seeds learn
    # different merges, with enough distinct words to fill several thousand merges.
    english = list(ENGLISH_WORDS) + [_made_up_word(rng) for _ in range(3000)]
    rng.shuffle(english)
    # Cumulative weights: random.choices would otherwise re-add them up on every call.
    weights = list(accumulate(1.0 / (rank + 1) ** 0.8 for rank in range(len(english))))
    makers = (_prose, _prose, _code, _code, _unicode, _numbers, _whitespace)
    return [rng.choice(makers)(rng, english, weights) for _ in range(n_lines)]


def _made_up_word(rng: random.Random) -> str:
    return "".join(rng.choices(SYLLABLES, k=rng.randint(1, 4)))


def _prose(rng: random.Random, words: list[str], weights: list[float]) -> str:
    sentence = rng.choices(words, cum_weights=weights, k=rng.randint(4, 18))
    sentence[0] = sentence[0].capitalize()
    if rng.random() < 0.3:
        sentence.insert(
            rng.randrange(len(sentence)),
            rng.choice(("I'm", "don't", "it's", "we'll", "they've", "YOU'RE")),
        )
    return " ".join(sentence) + rng.choice((".", "!", "?", ",", ":", "...")) + "\n"


def _code(rng: random.Random, words: list[str], weights: list[float]) -> str:
    name = rng.choice(IDENTIFIERS)
    return rng.choice(CODE_SNIPPETS).format(
        name=name,
        Name=name.title().replace("_", ""),
        arg=rng.choice(IDENTIFIERS),
        num=rng.randint(0, 100000),
    )


def _unicode(rng: random.Random, words: list[str], weights: list[float]) -> str:
    mixed = rng.choices(UNICODE_WORDS, k=rng.randint(3, 10)) + rng.choices(
        words, cum_weights=weights, k=3
    )
    rng.shuffle(mixed)
    return " ".join(mixed) + "\n"


def _numbers(rng: random.Random, words: list[str], weights: list[float]) -> str:
    parts = [
        str(rng.randint(0, 10**9)),
        f"{rng.random() * 1000:.3f}",
        f"0x{rng.getrandbits(32):08x}",
        f"{rng.randint(1, 31):02d}/{rng.randint(1, 12):02d}/{rng.randint(1990, 2030)}",
        f"v{rng.randint(0, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 99)}",
    ]
    rng.shuffle(parts)
    return " ".join(parts) + "\n"


def _whitespace(rng: random.Random, words: list[str], weights: list[float]) -> str:
    runs = (" " * rng.randint(2, 12), "\t" * rng.randint(1, 4), "\n" * rng.randint(2, 4), "\r\n")
    pieces = []
    for word in rng.choices(words, cum_weights=weights, k=rng.randint(3, 8)):
        pieces.append(word)
        pieces.append(rng.choice(runs))
    return "".join(pieces) + "\n"
