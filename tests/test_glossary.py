"""One word per concept: locales/glossary.toml holds both catalogues to it, and the two
languages agree on every number, placeholder and formula of a key.

Each check returns readable findings (file, key, the offending text) instead of a bare
assert, and the planted-variant tests prove the checks fire on a copy of the catalogue.

Run: python -m pytest tests/test_glossary.py -q
"""

from __future__ import annotations

import re
import string
import tomllib
from collections import Counter, defaultdict

import pytest

from pclab.ui import i18n

GLOSSARY = i18n.LOCALES / "glossary.toml"

MATHS = re.compile(r"\$\$?[^$]+\$\$?")
CODE = re.compile(r"`[^`]*`")
PLACEHOLDER = re.compile(r"\{[^{}]*\}")
NUMBER = re.compile(r"(?<![A-Za-z_\d.])\d+(?:[.,]\d+)*(?:e[−-]?\d+)?")
# A formula token: a run of Latin/Greek/maths characters holding at least one maths sign.
FORMULA_SIGNS = set("=÷×/²‖⌈⌉⌊⌋√Σ∑≥≤∈→^θτηλεΔ")
TOKEN_SPLIT = re.compile(r"[\s\u3000-\u303f\u4e00-\u9fff\uff00-\uffef“”‘’—–·]+")
SLASHED_WORDS = re.compile(r"(?<![\w/])[A-Za-z]{3,}/[A-Za-z]*(?![A-Za-z_(])")  # torch/backend
CJK = re.compile(r"[\u4e00-\u9fff]")

# (key, kind, token) -> why the two languages may legitimately differ there. Keep it short:
# a test fails when an entry no longer matches a real difference.
PARITY_EXCEPTIONS = {
    ("framework.weights_body", "number", "1"): "'unit weights' reads 权重全为 1 in Chinese",
    ("validation.sampler.seen_item", "formula", "×"): "'read 3×' is 读了 3 次: 次 is the ×",
}


def glossary() -> list[dict]:
    with GLOSSARY.open("rb") as f:
        return tomllib.load(f)["concept"]


def where(lang: str, key: str) -> str:
    area, _, rest = key.partition(".")
    return f"locales/{lang}/{area}.toml [{rest}]"


def prose(text: str) -> str:
    """The words of a value: maths, inline code and {placeholders} are not prose."""
    for pattern in (MATHS, CODE, PLACEHOLDER):
        text = pattern.sub(" ", text)
    return text


def forbidden_variants(catalogue: dict[str, str], lang: str, concepts: list[dict]) -> list[str]:
    flags = re.MULTILINE | (re.IGNORECASE if lang == "en" else 0)
    findings = []
    for key, value in catalogue.items():
        text = prose(value)
        for concept in concepts:
            for pattern in concept.get(f"{lang}_forbidden", ()):
                for m in re.finditer(pattern, text, flags):
                    context = text[max(0, m.start() - 20) : m.end() + 20].strip()
                    findings.append(
                        f"{where(lang, key)}: {m.group()!r} is a variant of {concept['id']!r}, "
                        f"write {concept[lang]!r} (…{context}…)"
                    )
    return findings


def unpaired_terms(en: dict[str, str], zh: dict[str, str], concepts: list[dict]) -> list[str]:
    """A concept named in one language's text of a key must be named in the other's."""
    findings = []
    for concept in (c for c in concepts if "en_term" in c):
        for key in en:
            says_en = re.search(concept["en_term"], prose(en[key]), re.IGNORECASE)
            says_zh = re.search(concept["zh_term"], prose(zh[key]), re.IGNORECASE)
            if says_en and not says_zh:
                findings.append(
                    f"{where('zh', key)}: the English says {says_en.group()!r} "
                    f"({concept['id']}), the Chinese lacks {concept['zh']!r}: {zh[key]!r}"
                )
            elif says_zh and not says_en and concept["pair"] == "both":
                findings.append(
                    f"{where('zh', key)}: {says_zh.group()!r} ({concept['id']}) where the "
                    f"English does not name it: {en[key]!r}"
                )
    return findings


def different_chinese_for_same_english(en: dict[str, str], zh: dict[str, str]) -> list[str]:
    keys_by_text = defaultdict(list)
    for key, text in en.items():
        keys_by_text[text].append(key)
    return [
        f"{en_text!r} reads differently in Chinese: " + "; ".join(f"{k} = {zh[k]!r}" for k in keys)
        for en_text, keys in keys_by_text.items()
        if len({zh[k] for k in keys}) > 1
    ]


def formula_parts(text: str) -> dict[str, Counter]:
    """What both languages must hold alike, counted: maths, code, placeholders, numbers and
    formula tokens (a formula written with spaces, τ / n, counts as its pieces)."""
    if "\\" in text and "$" not in text and not CJK.search(text):  # a bare formula for st.latex
        return {"latex": Counter([text])}
    parts = {"maths": Counter(MATHS.findall(text))}
    text = MATHS.sub(" ", text)
    parts["code"] = Counter(CODE.findall(text))
    parts["placeholder"] = Counter(set(PLACEHOLDER.findall(CODE.sub(" ", text))))
    text = SLASHED_WORDS.sub(" ", prose(text))
    parts["number"] = Counter(n.replace("−", "-") for n in NUMBER.findall(text))
    tokens = (t.strip(",.;:!?()[]*'\"") for t in TOKEN_SPLIT.split(text))
    parts["formula"] = Counter(t for t in tokens if FORMULA_SIGNS & set(t))
    return parts


def parity_differences(en: dict[str, str], zh: dict[str, str]) -> list[tuple[str, str, str]]:
    """(key, kind, token) for every token one language's text of a key holds more often."""
    differences = []
    for key in en:
        en_parts, zh_parts = formula_parts(en[key]), formula_parts(zh[key])
        for kind in sorted(set(en_parts) | set(zh_parts)):
            a, b = en_parts.get(kind, Counter()), zh_parts.get(kind, Counter())
            differences += [(key, kind, token) for token in sorted((a - b) + (b - a))]
    return differences


def parity_findings(en: dict[str, str], zh: dict[str, str]) -> list[str]:
    findings = []
    for key, kind, token in parity_differences(en, zh):
        if (key, kind, token) not in PARITY_EXCEPTIONS:
            texts = f"en {en[key]!r} / zh {zh[key]!r}"
            findings.append(f"{where('zh', key)}: {kind} {token!r} differs: {texts}")
    return findings


class Sample(str):
    """A placeholder's value for rendering a template: any format spec, any index or field."""

    def __format__(self, spec: str) -> str:
        return str(self)

    def __getitem__(self, key: object) -> Sample:
        return self

    def __getattr__(self, name: str) -> Sample:
        return self


class Filled(dict):
    def __init__(self, word: str):
        super().__init__()
        self.word = word

    def __missing__(self, key: str) -> Sample:
        return Sample(self.word)


# ASCII punctuation with a Chinese character on each side (spaces allowed): "计数不均, 一个",
# "（这里是 甲, 乙）", "**甲**: 乙". Code and maths are left out (`a, b`, $f(x)$).
ASCII_BETWEEN_CJK = re.compile(r"[\u4e00-\u9fff）](?:\*\*)? ?[,;:!?()](?:\*\*)? ?[\u4e00-\u9fff（]")
LATIN_TOUCHING_CJK = re.compile(r"[A-Za-z0-9]\**[\u4e00-\u9fff]|[\u4e00-\u9fff]\**[A-Za-z0-9]")


def rendered(lang: str, key: str, word: str, catalogue: dict[str, str] | None = None) -> str:
    """The text a page shows for `key`, every placeholder filled with `word`, through the same
    i18n.text the pages call (a template str.format cannot fill is taken as written)."""
    template = (catalogue or i18n.catalogue(lang))[key]
    try:
        filled = string.Formatter().vformat(template, (), Filled(word))
    except (ValueError, KeyError, IndexError):
        return template
    has_values = any(field is not None for _, field, _, _ in string.Formatter().parse(template))
    return i18n.space_latin(filled) if lang == "zh" and has_values else filled  # as i18n.text


def chinese_punctuation_findings(zh: dict[str, str]) -> list[str]:
    """ASCII punctuation between Chinese characters, or a Latin word touching one, in any
    rendered Chinese string: with Chinese placeholders ("甲") and with Latin ones ("ab")."""
    findings = []
    for key in zh:
        for word, pattern in (("甲", ASCII_BETWEEN_CJK), ("ab", LATIN_TOUCHING_CJK)):
            text = rendered("zh", key, word, zh)
            for m in pattern.finditer(prose(text)):
                findings.append(f"{where('zh', key)}: {m.group()!r} in {text[:80]!r}")
    return findings


@pytest.fixture(scope="module")
def catalogues() -> tuple[dict[str, str], dict[str, str]]:
    return dict(i18n.catalogue("en")), dict(i18n.catalogue("zh"))


def test_glossary_is_well_formed():
    concepts = glossary()
    ids = [c["id"] for c in concepts]
    assert len(ids) == len(set(ids)), "concept ids must be unique"
    for concept in concepts:
        assert concept["en"] and concept["zh"], concept["id"]
        if concept.get("loanword"):
            assert concept["zh"] == concept["en"], f"{concept['id']}: a loanword keeps its form"
        for field in ("en_forbidden", "zh_forbidden", "en_term", "zh_term"):
            patterns = concept.get(field, ())
            for pattern in [patterns] if isinstance(patterns, str) else patterns:
                re.compile(pattern)
        if "en_term" in concept:
            assert "zh_term" in concept and concept["pair"] in ("en", "both"), concept["id"]


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_no_forbidden_variant(catalogues, lang):
    catalogue = catalogues[i18n.LANGUAGES.index(lang)]
    findings = forbidden_variants(catalogue, lang, glossary())
    assert not findings, "\n".join(findings)


def test_each_concept_named_in_both_languages(catalogues):
    findings = unpaired_terms(*catalogues, glossary())
    assert not findings, "\n".join(findings)


def test_same_english_reads_the_same_in_chinese(catalogues):
    findings = different_chinese_for_same_english(*catalogues)
    assert not findings, "\n".join(findings)


def test_numbers_placeholders_and_formulas_agree(catalogues):
    findings = parity_findings(*catalogues)
    assert not findings, "\n".join(findings)


def test_every_parity_exception_is_still_needed(catalogues):
    differences = set(parity_differences(*catalogues))
    assert [e for e in PARITY_EXCEPTIONS if e not in differences] == []


# The variants issue 18 found in the Chinese catalogue: each must be caught if it comes back.
ISSUE_VARIANTS = (
    *("微批", "词元", "批次", "随机失活", "损失", "填充"),  # the experiment page's dialect
    *("补齐", "规约", "局部", "分岔", "漂移"),  # a second word for one concept across files
    "负样本",  # issue 45: the frameworks page's negatives, 负例 everywhere else
)


@pytest.mark.parametrize("variant", ISSUE_VARIANTS)
def test_a_planted_chinese_variant_is_reported(catalogues, variant):
    zh = dict(catalogues[1])
    zh["experiment.windows.caption"] += f"（{variant}）"
    findings = forbidden_variants(zh, "zh", glossary())
    assert len(findings) == 1
    assert "locales/zh/experiment.toml [windows.caption]" in findings[0]
    assert repr(variant) in findings[0]


# Issue 31: one name for P, for DDP's mean of local means and for the verdict.
ISSUE_31_VARIANTS = {
    "zh": ("副本数", "进程数", "副本均值", "对本地均值取平均", "DDP 默认平均", "结论"),
    "en": ("Replicas P", "world size", "mean of replica means", "replica mean", "DDP-default"),
}


@pytest.mark.parametrize(
    ("lang", "variant"), [(lang, v) for lang, vs in ISSUE_31_VARIANTS.items() for v in vs]
)
def test_a_second_name_for_p_the_local_means_or_the_verdict_is_reported(catalogues, lang, variant):
    catalogue = dict(catalogues[i18n.LANGUAGES.index(lang)])
    catalogue["check.results.heading"] += f" ({variant})"
    findings = forbidden_variants(catalogue, lang, glossary())
    assert findings and all("[results.heading]" in f for f in findings), findings
    concepts = {f.split(" is a variant of ")[1].split(",")[0] for f in findings}
    assert len(concepts) == 1 and concepts <= {"'world-size'", "'mean-of-local-means'", "'verdict'"}


def test_a_planted_english_variant_is_reported(catalogues):
    en = dict(catalogues[0])
    en["limits.lead"] = en["limits.lead"].replace("microbatches", "micro-batches", 1)
    findings = forbidden_variants(en, "en", glossary())
    assert len(findings) == 1 and "locales/en/limits.toml [lead]: 'micro-batch'" in findings[0]


def test_a_planted_meaning_slip_is_reported(catalogues):
    en, zh = catalogues
    slipped = dict(zh)
    # The two slips issue 18 found: 动量 for the optimizer's moments, 进程 {rank} for rank {rank}.
    slipped["home.steps.step.shows"] = (
        "一个 rank 溢出：所有 rank 必须一致同意跳过，参数、动量和步数都不能变。"
    )
    chunk = slipped["experiment.windows.chunk"]
    slipped["experiment.windows.chunk"] = chunk.replace("rank {rank}", "进程 {rank}")
    findings = unpaired_terms(en, slipped, glossary())
    assert len(findings) == 3, findings  # moments missing, 动量 unasked for, rank missing
    files = ("locales/zh/home.toml [steps.step.", "locales/zh/experiment.toml [windows.chunk]")
    assert all(f.startswith(files) for f in findings)


def test_a_planted_number_or_formula_change_is_reported(catalogues):
    en, zh = catalogues
    changed = dict(zh)
    for key, old, new in (
        ("home.steps.denominator.ask", "96", "69"),
        ("framework.lead", "\\frac{P}{N}", "\\frac{N}{P}"),
        ("clipping.exercise_why", "τ / n", "τ · n"),
    ):
        changed[key] = changed[key].replace(old, new, 1)
    findings = parity_findings(en, changed)
    assert any("[steps.denominator.ask]: number '96' differs" in f for f in findings)
    assert any("[lead]: maths" in f for f in findings)
    assert any("[exercise_why]: formula" in f for f in findings)


def test_a_planted_second_wording_is_reported(catalogues):
    en, zh = catalogues
    changed = dict(zh)
    changed["clipping.run_button"] = "运行双进程对照"
    findings = different_chinese_for_same_english(en, changed)
    assert len(findings) == 1 and "'Run the two-process check'" in findings[0]


def test_chinese_is_punctuated_as_chinese(catalogues):
    findings = chinese_punctuation_findings(catalogues[1])
    assert not findings, "\n".join(findings)


@pytest.mark.parametrize(
    ("key", "value", "caught"),
    [
        ("check.results.failed", "以下场景不是相同的更新：{scenarios}, 请修改。", "甲, 请"),
        ("check.skipped.item", "场景**{scenario}**: {reason}。", "甲**: 甲"),
        ("check.hf.shift", "这里是（{weights}）(实测)", "）(实"),
        ("check.note.control", "计数相同不能作为证据;错误的方案也能通过。", "据;错"),
        ("check.note.control", "计数相同的 microbatch不能作为证据。", "h不"),
    ],
)
def test_a_planted_ascii_punctuation_is_reported(catalogues, key, value, caught):
    zh = dict(catalogues[1])
    zh[key] = value
    findings = chinese_punctuation_findings(zh)
    assert len(findings) == 1 and repr(caught) in findings[0], findings


def test_the_locale_join_punctuates_each_language():
    assert i18n.join("en", ["uneven counts", "an empty rank"]) == "uneven counts, an empty rank"
    assert i18n.join("zh", ["计数不均", "一个空的 microbatch"]) == "计数不均、一个空的 microbatch"
    assert i18n.join("zh", ["0.952", "1.05"]) == "0.952、1.05"
    assert i18n.join("zh", ["甲", "乙"], "clauses") == "甲，乙"
    assert i18n.join("en", ["a", "b"], "clauses") == "a; b"
    assert i18n.join("zh", ["计数相同（对照）", "说明"], "head") == "计数相同（对照）：说明"
    assert i18n.join("zh", ["rank 0", "参数"]) == "rank 0、参数"
    assert (
        i18n.space_latin("场景**一个空的 microbatch**已跳过")
        == "场景**一个空的 microbatch** 已跳过"
    )
    assert i18n.space_latin("共3个rank") == "共 3 个 rank"
    with pytest.raises(ValueError, match="how='sentence'"):
        i18n.join("en", ["a"], "sentence")


# A page named in running text: "the page "Check a trainer"" / “检查 trainer”页. Issue 45 found
# "检查训练器" (no page has that title) in ASCII quotes; Chinese quotes a name with “”.
PAGE_NAMED = {
    "en": re.compile(r'(["“])([^"”]{1,40})["”] page|\bpage (["“])([^"”]{1,40})["”]'),
    "zh": re.compile(r"([\"“「])([^\"”」]{1,40})[\"”」] ?页"),
}
QUOTE = {"en": '"', "zh": "“"}


def page_name_findings(catalogue: dict[str, str], lang: str) -> list[str]:
    """Every page a text names in quotes must be named by its title (`<key>.nav`, or a
    {placeholder} the code fills with it), in the language's quotes."""
    from pclab.ui.pages import PAGES

    titles = {catalogue[p.title_key] for p in PAGES}
    findings = []
    for key, value in catalogue.items():
        for m in PAGE_NAMED[lang].finditer(value):
            quote, name = next((q, n) for q, n in zip(m.groups()[::2], m.groups()[1::2]) if n)
            if name not in titles and not PLACEHOLDER.fullmatch(name):
                findings.append(f"{where(lang, key)}: {name!r} is no page's title ({titles})")
            if quote != QUOTE[lang]:
                findings.append(f"{where(lang, key)}: {name!r} quoted with {quote!r}")
    return findings


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_a_page_is_named_by_its_title(catalogues, lang):
    findings = page_name_findings(catalogues[i18n.LANGUAGES.index(lang)], lang)
    assert not findings, "\n".join(findings)


@pytest.mark.parametrize(
    ("value", "caught"),
    [
        ("检查你自己的对比学习训练器：“检查训练器”页上的耦合示例", "is no page's title"),
        ('检查你自己的对比学习 trainer："检查 trainer"页上的耦合示例', "quoted with '\"'"),
    ],
)
def test_a_planted_page_name_is_reported(catalogues, value, caught):
    zh = dict(catalogues[1])
    zh["coupled.to_check"] = value
    findings = page_name_findings(zh, "zh")
    assert len(findings) == 1 and caught in findings[0], findings
