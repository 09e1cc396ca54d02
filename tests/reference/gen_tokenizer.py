"""Generate the SentencePiece golden files in tests/golden/ from Google's `sentencepiece`.

The Rust text tokenizer (src/moshi/tokenizer.rs) decodes Moshi's text token ids from
Kyutai's SentencePiece model (`tokenizer_spm_32k_3.model`). This script makes the
reference it is checked against:

  1. trains three tiny models on a corpus generated here (seeded): varied English plus
     rarer non-ASCII text (accents, CJK, emoji), so that `byte_fallback` models spell the
     rare characters as `<0xNN>` byte pieces:
       - spm_test.model     unigram, byte_fallback, Kyutai's id layout (unk 0, <s> 1,
                            </s> 2, <pad> 3), a control and two user-defined symbols,
                            add_dummy_prefix and remove_extra_whitespaces on (the defaults);
       - spm_bpe.model      BPE, byte_fallback, add_dummy_prefix on,
                            remove_extra_whitespaces off, whitespace-only pieces, no <pad>;
       - spm_plain.model    unigram, no byte_fallback, both whitespace options off, a custom
                            `unk_surface`;
  2. builds small hand-written ModelProto byte strings (a minimal protobuf writer below)
     for the corner cases of the format: pieces whose string is shared by a control and a
     normal piece, unknown enum values, unknown fields and groups, merged sub-messages, and
     models sentencepiece refuses to load (no <unk>, two <unk>, empty piece, bad byte
     pieces, truncated or malformed protobuf);
  3. for every model: whether `SentencePieceProcessor(model_proto=...)` loads it; if it does,
     `GetPieceSize`, `id_to_piece` and the piece type of every id (as far as the binding
     tells: `IsUnknown/IsControl/IsByte/IsUnused`, so user-defined reads as normal),
     `unk_id/bos_id/eos_id/pad_id`, and `decode_ids` of many id sequences (encoded sentences, random ids, control
     and unknown ids in every position, byte pieces forming valid and invalid UTF-8,
     runs interrupted by other pieces); for the trained models also the text each id adds
     after a fixed piece (the per-token streaming expectation), `decode_ids` of each
     sequence without Moshi's padding ids (0 and 3), which prefix lengths of the model
     file load, and what loading does to single-byte corruptions of the file.

Everything goes to tests/golden/spm_*.model and tests/golden/spm_cases.json. Run by hand
(CI never runs Python; the Rust test only reads the committed outputs):

    python3 -m venv v && v/bin/pip install sentencepiece==0.2.3
    v/bin/python tests/reference/gen_tokenizer.py
"""

import base64
import hashlib
import io
import json
import random
import struct
import sys
from pathlib import Path

import sentencepiece as spm

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
SEED = 20261129
SPACE = "\u2581"
PIECE_TYPES = ["normal", "unknown", "control", "user_defined", "unused", "byte"]
TYPE_CODE = {"normal": "N", "unknown": "K", "control": "C", "unused": "X", "byte": "B"}


# ---------------------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------------------

WORDS = """the of and to in is was for that on with as by at from his her they this
have had not are but be one all were when we there can an which their said if do will
each about how up out them then she many some so these would other into has more two
time like could no make than first been who its now people my made over did down only
way find use may water long little very after words called just where most know get
through back much before go good new write our used me man too any day same right look
think also around another came come work three word must because does part even place
well such here take why things help put years different away again off went old number
great tell men say small every found still between name should home big give air line
set own under read last never us left end along while might next sound below saw
something thought both few those always looked show large often together asked house
world going want school important until form food keep children feet land side without
boy once animals life enough took sometimes four head above kind began almost live page
got earth need far hand high year mother light parts country father let night following
picture being study second eyes soon times story boys since white days ever paper hard
near sentence better best across during today others however sure means knew try told
young miles sun ways thing whole hear example heard several change answer room sea
against top turned learn point city play toward five using himself usually speech model
audio stream token moshi mimi codec frame latency transcript kyutai voice listen speak
""".split()

RARE = [
    "café", "naïve", "résumé", "coöperate", "façade", "jalapeño", "Zürich", "São Paulo",
    "smörgåsbord", "Ångström", "crème brûlée", "piñata", "Dvořák", "Łódź", "Ελλάδα",
    "Москва", "日本語", "東京", "こんにちは", "한국어", "中文", "😀", "🎉", "👍🏽", "🚀",
    "∑", "→", "€", "£", "½", "™", "…", "“quoted”", "— dash", "ﬁ ligature",
]


def make_corpus(rng):
    lines = []
    for i in range(600):
        n = rng.randint(3, 18)
        words = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words[0] = words[0].capitalize()
        if rng.random() < 0.15:
            words.insert(rng.randrange(len(words) + 1), str(rng.randint(0, 9999)))
        if rng.random() < 0.08:
            words.insert(rng.randrange(len(words) + 1), rng.choice(RARE[:14]))
        line = " ".join(words) + rng.choice([".", ".", "?", "!", ",", ""])
        if rng.random() < 0.05:
            line = "  " + line.replace(" ", "   ", 1)
        lines.append(line)
    return lines


SENTENCES = [
    "Hello world.",
    "the quick brown fox jumps over the lazy dog",
    "  leading and   repeated   spaces  ",
    "Moshi speaks while Mimi listens: audio stream, token by token.",
    "A café in São Paulo serves crème brûlée.",
    "naïve résumé for Dvořák",
    "日本語のテキスト and English",
    "emoji 😀🎉👍🏽🚀 at the end",
    "Москва — Ελλάδα — 한국어 — 中文",
    "numbers 1234567890 and ½ € £ ™",
    "x",
    " ",
    "",
    "<user> defined ▁hello symbols",
    "control <ctrl> is not matched in text",
    "tab\tand\nnewline",
    "ZÜRICH ÅNGSTRÖM",
    "“quoted” … ﬁ",
    "\U0010FFFD private use",
]


# ---------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------

def train(corpus, **kwargs):
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_writer=buf,
        normalization_rule_name="identity",  # keeps the file small (no charsmap)
        num_threads=1,
        minloglevel=2,
        **kwargs,
    )
    return buf.getvalue()


# ---------------------------------------------------------------------------------------
# A minimal protobuf writer for the hand-built models
# ---------------------------------------------------------------------------------------

def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def vint(field, n):
    return key(field, 0) + varint(n)


def ld(field, data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    return key(field, 2) + varint(len(data)) + data


def f32(field, x):
    return key(field, 5) + struct.pack("<f", x)


NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def piece(p, score=0.0, typ=None):
    body = ld(1, p) + f32(2, score)
    if typ is not None:
        body += vint(3, typ)
    return ld(1, body)


def pieces(*specs):
    return b"".join(piece(p, -float(i), t) for i, (p, t) in enumerate(specs))


BASE = [("<unk>", UNKNOWN), ("<s>", CONTROL), ("</s>", CONTROL)]
WORDS_SPEC = [(SPACE + "a", NORMAL), ("b", NORMAL), (SPACE, NORMAL), (SPACE + SPACE + "c", NORMAL),
              ("d" + SPACE, NORMAL)]


def trainer(**fields):
    """TrainerSpec (field 2 of ModelProto) from named fields."""
    numbers = {"model_type": 3, "byte_fallback": 35, "unk_surface": 44, "unk_piece": 45,
               "bos_piece": 46, "eos_piece": 47, "pad_piece": 48}
    body = b""
    for name, value in fields.items():
        n = numbers[name]
        body += ld(n, value) if isinstance(value, str) else vint(n, int(value))
    return ld(2, body)


def normalizer(field=3, **fields):
    numbers = {"name": 1, "precompiled_charsmap": 2, "add_dummy_prefix": 3,
               "remove_extra_whitespaces": 4}
    body = b""
    for name, value in fields.items():
        n = numbers[name]
        body += ld(n, value) if isinstance(value, (str, bytes)) else vint(n, int(value))
    return ld(field, body)


BYTES_SPEC = [("<0x%02X>" % b, BYTE) for b in range(256)]


def edge_models():
    """(name, bytes) of hand-built models, loadable or not."""
    m = []
    simple = pieces(*BASE, *WORDS_SPEC)
    m.append(("minimal", simple))
    m.append(("no_specs_bpe", simple + trainer(model_type=2)))
    m.append(("dummy_prefix_only", simple + normalizer(add_dummy_prefix=1, remove_extra_whitespaces=0)))
    m.append(("extra_ws_only", simple + normalizer(add_dummy_prefix=0, remove_extra_whitespaces=1)))
    m.append(("no_ws_options", simple + normalizer(add_dummy_prefix=0, remove_extra_whitespaces=0)))
    m.append(("unk_surface_empty", simple + trainer(unk_surface="")))
    m.append(("unk_surface_custom", simple + trainer(unk_surface="<?>")))
    m.append(("unk_surface_empty_field_then_set", simple + trainer(unk_surface="") + trainer(unk_surface="[x]")))
    # A normal piece with the same string as a control or byte piece (sentencepiece 0.2.1
    # decoded ids through PieceToId, which prefers the reserved piece; 0.2.3 does not).
    m.append(("normal_shadowed_by_control", pieces(*BASE, ("<s>", NORMAL), ("x", NORMAL), ("<0x41>", NORMAL))))
    m.append(("normal_shadowed_by_byte",
              pieces(*BASE, ("<0x41>", NORMAL), ("x", NORMAL), *BYTES_SPEC) + trainer(byte_fallback=1)))
    # Unknown enum values are kept as unknown fields: the type stays as it was.
    m.append(("unknown_type_enum", pieces(*BASE) + piece("y", 0.0, 9) + piece("z", 0.0, -1)
              + ld(1, ld(1, "w") + vint(3, CONTROL) + vint(3, 77))))
    m.append(("unknown_model_type_enum", simple + trainer(model_type=9)))
    m.append(("type_repeated_last_wins", pieces(*BASE) + ld(1, ld(1, "q") + vint(3, CONTROL) + vint(3, NORMAL))
              + ld(1, ld(1, "r") + vint(3, NORMAL) + vint(3, USER_DEFINED))))
    m.append(("user_defined_and_unused", pieces(*BASE, ("u" + SPACE + "v", USER_DEFINED), ("gone", UNUSED), ("k", NORMAL))))
    # Unknown fields of every wire type, a group, and a known field with the wrong wire type.
    m.append(("unknown_fields", simple + vint(99, 5) + key(98, 1) + b"\x01" * 8 + key(97, 5) + b"\x02" * 4
              + ld(96, b"\xff\xfe") + key(95, 3) + vint(1, 7) + ld(2, "in group") + key(95, 4)
              + key(1, 0) + varint(3) + key(3, 5) + b"\0\0\0\0"))
    m.append(("merged_trainer_specs", pieces(*BASE, *BYTES_SPEC, ("m", NORMAL)) + trainer(byte_fallback=1)
              + trainer(unk_surface="??")))
    m.append(("custom_special_pieces", pieces(("[UNK]", UNKNOWN), ("[BOS]", CONTROL), ("[EOS]", NORMAL), ("[PAD]", CONTROL),
                                             ("p", NORMAL))
              + trainer(unk_piece="[UNK]", bos_piece="[BOS]", eos_piece="[EOS]", pad_piece="[PAD]")))
    m.append(("unk_piece_not_unknown", pieces(("<unk>", NORMAL), ("[U]", UNKNOWN), ("<s>", NORMAL), ("x", NORMAL))))
    m.append(("empty_special_piece_names", simple + trainer(unk_piece="", bos_piece="")))
    m.append(("bpe_reserved_only", pieces(*BASE) + trainer(model_type=2)))
    m.append(("unigram_reserved_only", pieces(*BASE)))
    m.append(("word_model", simple + trainer(model_type=3)))
    m.append(("char_model", simple + trainer(model_type=4)))
    m.append(("negative_and_large_varints", simple + trainer(model_type=(1 << 64) - 1) + vint(50, (1 << 64) - 1)))
    m.append(("zero_length_fields", simple + ld(2, b"") + ld(3, b"") + ld(5, b"") + ld(4, b"")))
    m.append(("denormalizer_identity_empty", simple + normalizer(field=5, name="identity")))
    m.append(("only_byte_pieces_and_unk", pieces(("<unk>", UNKNOWN), *BYTES_SPEC) + trainer(byte_fallback=1, model_type=2)))
    m.append(("byte_run_through_control",
              pieces(*BASE, *BYTES_SPEC, ("t", NORMAL), (SPACE + "s", NORMAL)) + trainer(byte_fallback=1)))
    # Refused by sentencepiece.
    m.append(("empty", b""))
    m.append(("no_unk", pieces(("<s>", CONTROL), ("a", NORMAL))))
    m.append(("two_unk", pieces(("<unk>", UNKNOWN), ("<unk2>", UNKNOWN), ("a", NORMAL))))
    m.append(("empty_piece", pieces(*BASE, ("", NORMAL), ("a", NORMAL))))
    m.append(("piece_without_string", pieces(*BASE) + ld(1, f32(2, 1.0))))
    m.append(("duplicate_normal", pieces(*BASE, ("a", NORMAL), ("a", USER_DEFINED))))
    m.append(("duplicate_control", pieces(*BASE, ("<s>", CONTROL), ("a", NORMAL))))
    m.append(("byte_piece_without_fallback", pieces(*BASE, *BYTES_SPEC, ("a", NORMAL))))
    m.append(("fallback_missing_byte", pieces(*BASE, *BYTES_SPEC[:255], ("a", NORMAL)) + trainer(byte_fallback=1)))
    m.append(("lowercase_byte_piece",
              pieces(*BASE, *BYTES_SPEC[:171], ("<0xab>", BYTE), *BYTES_SPEC[172:], ("a", NORMAL)) + trainer(byte_fallback=1)))
    m.append(("bad_byte_piece", pieces(*BASE, ("<0x1>", BYTE), ("a", NORMAL)) + trainer(byte_fallback=1)))
    m.append(("field_number_zero", simple + vint(0, 1)))
    m.append(("wire_type_6", simple + key(7, 6) + b"\0"))
    m.append(("wire_type_7", simple + key(7, 7) + b"\0"))
    m.append(("end_group_at_top", simple + key(9, 4)))
    m.append(("unterminated_group", simple + key(9, 3) + vint(1, 1)))
    m.append(("mismatched_group_end", simple + key(9, 3) + key(8, 4)))
    m.append(("truncated_varint", simple + b"\x80"))
    m.append(("eleven_byte_varint", simple + key(50, 0) + b"\xff" * 10 + b"\x01"))
    m.append(("length_past_end", simple + key(50, 2) + varint(10) + b"abc"))
    m.append(("huge_length", simple + key(50, 2) + varint((1 << 63) + 5)))
    m.append(("truncated_fixed32", simple + key(50, 5) + b"\0\0"))
    m.append(("truncated_fixed64", simple + key(50, 1) + b"\0\0\0\0\0\0\0"))
    m.append(("piece_submessage_garbage", pieces(*BASE) + ld(1, b"\x0a\x05ab")))
    m.append(("trainer_spec_garbage", simple + ld(2, b"\xff")))
    m.append(("garbage_text", b"this is not a sentencepiece model, just text\n"))
    return m


# ---------------------------------------------------------------------------------------
# Reference queries
# ---------------------------------------------------------------------------------------

def load(data):
    # Not SentencePieceProcessor(model_proto=data): the constructor skips loading when
    # model_proto is empty, leaving an uninitialized processor.
    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(data)
        return sp, None
    except Exception as e:  # RuntimeError / OSError, depending on the failure
        return None, "%s: %s" % (type(e).__name__, e)


def piece_type(sp, i):
    if sp.IsUnknown(i):
        return "unknown"
    if sp.IsControl(i):
        return "control"
    if sp.IsByte(i):
        return "byte"
    if sp.IsUnused(i):
        return "unused"
    # The binding has no IsUserDefined: user-defined pieces read as "normal" here (and the
    # Rust test compares them so).
    return "normal"


def utf8_bytes_cases(rng):
    """Byte strings that exercise sentencepiece's UTF-8 assembly of byte pieces."""
    out = [
        "é".encode(), "日".encode(), "😀".encode(), "a".encode(), b"\x00", b"\x7f",
        b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc2\x80", b"\xdf\xbf",
        b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xe0\xa0\x80", b"\xed\x9f\xbf", b"\xed\xa0\x80",
        b"\xed\xbf\xbf", b"\xee\x80\x80", b"\xef\xbf\xbd", b"\xef\xbf\xbf",
        b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf0\x90\x80\x80", b"\xf4\x8f\xbf\xbf",
        b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf7\xbf\xbf\xbf", b"\xf8\x88\x80\x80\x80",
        b"\xfc\x84\x80\x80\x80\x80", b"\xfe", b"\xff", b"\xc3", b"\xe6\x97", b"\xf0\x9f\x98",
        b"\xc3\x41", b"\xe6\x41\x97", b"\xf0\x9f\x41\x80", b"\xc3\xa9\xa9", b"\xa9\xc3\xa9",
        b"\xc3\xc3\xa9", b"\xe6\x97\xa5\xe6\x97", b"\xf0\x9f\x98\x80\xf0",
        "ﬁ naïve 😀 日本語".encode(), b"\xed\xa0\xbd\xed\xb8\x80",  # CESU-8 surrogate pair
    ]
    for _ in range(25):
        n = rng.randint(1, 8)
        out.append(bytes(rng.choice([rng.randrange(256), rng.randrange(0x80, 0xc0),
                                     rng.randrange(0xc0, 0xf8)]) for _ in range(n)))
    for _ in range(12):
        s = "".join(chr(rng.choice([rng.randrange(0x80, 0x800), rng.randrange(0x800, 0xd800),
                                    rng.randrange(0xe000, 0x10000), rng.randrange(0x10000, 0x110000)]))
                    for _ in range(rng.randint(1, 4)))
        out.append(s.encode("utf-8", "surrogatepass"))
    return out


def id_cases(sp, rng, sentences, rich):
    n = sp.GetPieceSize()
    types = [piece_type(sp, i) for i in range(n)]
    by_type = {t: [i for i in range(n) if types[i] == t] for t in PIECE_TYPES}
    byte_id = {}
    for i in by_type["byte"]:
        byte_id[int(sp.IdToPiece(i)[3:5], 16)] = i
    ws = [i for i in range(n) if sp.IdToPiece(i).startswith(SPACE) and types[i] not in ("byte", "control", "unknown")]
    plain = [i for i in range(n) if not sp.IdToPiece(i).startswith(SPACE) and types[i] == "normal"]
    cases = [[]]
    cases += [[i] for i in range(n)] if n <= 40 else []
    for s in sentences if rich else sentences[:8]:
        ids = sp.EncodeAsIds(s)
        cases.append(ids)
        if ids and rich:
            cases.append([1 % n] + ids + [2 % n])
    specials = by_type["control"] + by_type["unknown"]
    for _ in range(80 if rich else 25):
        k = rng.randint(1, 16)
        cases.append([rng.randrange(n) for _ in range(k)])
    for _ in range(50 if rich else 20):
        seq = []
        for _ in range(rng.randint(1, 10)):
            pick = rng.random()
            if pick < 0.25 and specials:
                seq.append(rng.choice(specials))
            elif pick < 0.5 and ws:
                seq.append(rng.choice(ws))
            elif pick < 0.7 and plain:
                seq.append(rng.choice(plain))
            elif pick < 0.9 and by_type["byte"]:
                seq.append(rng.choice(by_type["byte"]))
            else:
                seq.append(rng.randrange(n))
        cases.append(seq)
    # Whitespace at the start: control pieces first, whitespace-only pieces, then words.
    for lead in ([], specials[:1], specials[-1:], specials):
        for w in ws[:6]:
            cases.append(lead + [w])
            cases.append(lead + [w, w])
            if plain:
                cases.append(lead + [w, plain[0], w])
                cases.append(lead + [plain[0], w])
    if byte_id:
        byte_strings = utf8_bytes_cases(rng)
        for b in byte_strings if rich else byte_strings[::10]:
            ids = [byte_id[x] for x in b]
            cases.append(ids)
            if ws:
                cases.append([ws[0]] + ids + [ws[-1]])
                cases.append(ids + [ws[0]])
            if specials:
                # a control or unknown piece in the middle of a byte run splits it
                mid = len(ids) // 2
                cases.append(ids[:mid] + [rng.choice(specials)] + ids[mid:])
            if plain:
                cases.append([plain[0]] + ids)
        space = byte_id[0x20]
        cases.append([space, space] + ([ws[0]] if ws else []))
        cases.append([space] + ([plain[0]] if plain else []))
    seen, unique = set(), []
    for c in cases:
        t = tuple(c)
        if t not in seen:
            seen.add(t)
            unique.append(c)
    return unique


def describe(name, data, rng, sentences=(), rich=False, file=None):
    sp, err = load(data)
    entry = {"name": name}
    if file is not None:
        entry["file"] = file
    else:
        entry["base64"] = base64.b64encode(data).decode()
    if sp is None:
        entry["loads"] = False
        entry["python_error"] = err
        return entry
    n = sp.GetPieceSize()
    entry["loads"] = True
    entry["piece_size"] = n
    entry["pieces"] = [sp.IdToPiece(i) for i in range(n)]
    entry["types"] = "".join(TYPE_CODE[piece_type(sp, i)] for i in range(n))
    entry["unk_id"] = sp.unk_id()
    entry["bos_id"] = sp.bos_id()
    entry["eos_id"] = sp.eos_id()
    entry["pad_id"] = sp.pad_id()
    entry["cases"] = [{"ids": ids, "text": sp.DecodeIds(ids)} for ids in id_cases(sp, rng, sentences, rich)]
    # Out-of-range ids are refused.
    for bad in ([n], [0, n + 5]):
        try:
            sp.DecodeIds(bad)
            raise SystemExit("decode_ids accepted out-of-range ids %r" % bad)
        except IndexError:
            pass
    entry["out_of_range_refused"] = True
    return entry


def anchor_id(sp):
    """A normal piece without U+2581 whose text is not empty: the 'previous text' used to
    define what one token adds."""
    for i in range(sp.GetPieceSize()):
        p = sp.IdToPiece(i)
        if piece_type(sp, i) == "normal" and SPACE not in p and sp.DecodeIds([i]):
            return i
    raise SystemExit("no anchor piece")


def per_token(sp):
    a = anchor_id(sp)
    head = sp.DecodeIds([a])
    out = []
    for i in range(sp.GetPieceSize()):
        full = sp.DecodeIds([a, i])
        assert full.startswith(head), (a, i, full)
        out.append(full[len(head):])
    return a, out


def truncations(data):
    """Prefix lengths of the model file that sentencepiece loads, with their piece count."""
    ok = []
    for k in range(len(data)):
        sp, _ = load(data[:k])
        if sp is not None:
            ok.append([k, sp.GetPieceSize()])
    return ok


def corruptions(data, rng, count):
    """Single-byte corruptions of the model file: loads or not, and when it loads, the
    sha256 of its pieces, types and the decoding of every id in order (the file stays small;
    the Rust test hashes the same text)."""
    out = []
    for _ in range(count):
        pos = rng.randrange(len(data))
        val = rng.randrange(256)
        if val == data[pos]:
            val ^= 0x55
        bad = bytearray(data)
        bad[pos] = val
        sp, err = load(bytes(bad))
        e = {"pos": pos, "byte": val, "loads": sp is not None}
        if sp is not None:
            try:
                e["digest"] = model_digest(sp)
            except UnicodeDecodeError:
                # a piece is no longer UTF-8: the Rust reader refuses such a model
                e["invalid_utf8"] = True
        out.append(e)
    return out


def model_digest(sp):
    """sha256 of: each piece, its type and its id's decoding alone, one line each, then the
    decoding of all ids in order."""
    n = sp.GetPieceSize()
    lines = ["%s\t%s\t%s" % (sp.IdToPiece(i), piece_type(sp, i), sp.DecodeIds([i])) for i in range(n)]
    lines.append(sp.DecodeIds(list(range(n))))
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def main():
    rng = random.Random(SEED)
    spm.set_random_generator_seed(SEED)
    corpus = make_corpus(rng)
    held_out = SENTENCES + make_corpus(random.Random(SEED + 1))[:25] + RARE

    trained = [
        ("spm_test.model", dict(
            model_type="unigram", vocab_size=400, byte_fallback=True, character_coverage=0.98,
            unk_id=0, bos_id=1, eos_id=2, pad_id=3, control_symbols=["<ctrl>"],
            user_defined_symbols=["<user>", SPACE + "hello"])),
        ("spm_bpe.model", dict(
            model_type="bpe", vocab_size=350, byte_fallback=True, character_coverage=0.98,
            remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
            split_by_whitespace=False)),
        ("spm_plain.model", dict(
            model_type="unigram", vocab_size=300, byte_fallback=False, character_coverage=0.995,
            add_dummy_prefix=False, remove_extra_whitespaces=False, unk_surface="<?>",
            pad_id=3, unk_id=1, bos_id=0, eos_id=-1)),
    ]
    models = []
    for file, kwargs in trained:
        data = train(corpus, **kwargs)
        (GOLDEN / file).write_bytes(data)
        entry = describe(file.removesuffix(".model"), data, rng, held_out, rich=True, file=file)
        assert entry["loads"], entry
        sp, _ = load(data)
        a, texts = per_token(sp)
        entry["per_token_anchor"] = a
        entry["per_token"] = texts
        pad = sp.pad_id()
        if pad >= 0:
            entry["moshi_padding"] = [0, pad]
            # decode_ids of each case without the padding ids, where that differs
            for c in entry["cases"]:
                kept = [i for i in c["ids"] if i not in (0, pad)]
                if kept != c["ids"]:
                    c["without_padding"] = sp.DecodeIds(kept)
        entry["loading_prefixes"] = truncations(data)
        entry["digest"] = model_digest(sp)
        entry["corruptions"] = corruptions(data, rng, 200)
        models.append(entry)
        print("%s: %d bytes, %d pieces, %d cases, %d loading prefixes" % (
            file, len(data), entry["piece_size"], len(entry["cases"]), len(entry["loading_prefixes"])),
            file=sys.stderr)

    for name, data in edge_models():
        entry = describe(name, data, rng, SENTENCES, rich=False)
        models.append(entry)
        print("%s: %s" % (name, "loads" if entry["loads"] else entry["python_error"]), file=sys.stderr)

    garbage = []
    for i in range(200):
        n = rng.choice([1, 2, 3, 5, 8, 16, 64, 256])
        data = bytes(rng.randrange(256) for _ in range(n))
        sp, _ = load(data)
        garbage.append({"base64": base64.b64encode(data).decode(), "loads": sp is not None})

    out = {
        "generator": "tests/reference/gen_tokenizer.py",
        "sentencepiece": spm.__version__,
        "models": models,
        "garbage": garbage,
    }
    text = json.dumps(out, ensure_ascii=False, separators=(",", ":"))
    (GOLDEN / "spm_cases.json").write_text(text + "\n", encoding="utf-8")
    print("spm_cases.json: %d bytes" % len(text.encode()), file=sys.stderr)


if __name__ == "__main__":
    main()
