//! The SentencePiece text tokenizer against Google's `sentencepiece` (0.2.3): the committed
//! outputs of `tests/reference/gen_tokenizer.py` (`tests/golden/spm_cases.json`, three
//! trained models and many hand-built ones). Every text must match `decode_ids` exactly;
//! every model must load exactly when sentencepiece loads it. No file system access: the
//! golden files are compiled in.

use inferencelayer::moshi::tokenizer::{PieceType, TextStream, TextTokenizer, END_OF_TEXT_PADDING_ID};
use inferencelayer::Error;
use serde_json::Value;
use sha2::{Digest, Sha256};

const CASES: &str = include_str!("golden/spm_cases.json");
const MODEL_FILES: [(&str, &[u8]); 3] = [
    ("spm_test.model", include_bytes!("golden/spm_test.model")),
    ("spm_bpe.model", include_bytes!("golden/spm_bpe.model")),
    ("spm_plain.model", include_bytes!("golden/spm_plain.model")),
];

fn golden() -> Value {
    serde_json::from_str(CASES).expect("spm_cases.json")
}

fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("bad base64 {c}"),
    };
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for &c in s.as_bytes().iter().filter(|&&c| c != b'=') {
        acc = acc << 6 | val(c) as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

fn model_bytes(m: &Value) -> Vec<u8> {
    if let Some(f) = m["file"].as_str() {
        MODEL_FILES.iter().find(|(n, _)| *n == f).map(|(_, b)| b.to_vec()).expect("model file")
    } else {
        base64(m["base64"].as_str().expect("base64"))
    }
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn opt_id(v: &Value) -> Option<u32> {
    let i = v.as_i64().unwrap();
    (i >= 0).then_some(i as u32)
}

fn type_code(t: PieceType) -> char {
    match t {
        PieceType::Normal => 'N',
        PieceType::Unknown => 'K',
        PieceType::Control => 'C',
        // sentencepiece's Python binding cannot tell user-defined pieces from normal ones
        PieceType::UserDefined => 'N',
        PieceType::Unused => 'X',
        PieceType::Byte => 'B',
    }
}

fn models(g: &Value) -> &Vec<Value> {
    g["models"].as_array().unwrap()
}

fn stream_text(tok: &TextTokenizer, stream: &mut TextStream, ids: &[u32]) -> String {
    let mut s = String::new();
    for &id in ids {
        s += &stream.push(tok, id).unwrap();
    }
    s + &stream.finish()
}

/// Everything recorded for a model that loads: pieces, types, special ids, every case
/// through `decode` and through a `TextStream`, out-of-range ids. Returns the cases checked.
fn check_loaded(name: &str, tok: &TextTokenizer, m: &Value) -> usize {
    let n = m["piece_size"].as_u64().unwrap() as usize;
    assert_eq!(tok.piece_count(), n, "{name}: piece count");
    let pieces = m["pieces"].as_array().unwrap();
    let types: Vec<char> = m["types"].as_str().unwrap().chars().collect();
    for id in 0..n as u32 {
        assert_eq!(tok.piece(id), pieces[id as usize].as_str(), "{name}: piece {id}");
        assert_eq!(tok.piece_type(id).map(type_code), Some(types[id as usize]), "{name}: type of {id}");
    }
    assert_eq!(tok.piece(n as u32), None);
    assert_eq!(tok.piece_type(n as u32), None);
    assert_eq!(tok.unk_id(), opt_id(&m["unk_id"]), "{name}: unk_id");
    assert_eq!(tok.bos_id(), opt_id(&m["bos_id"]), "{name}: bos_id");
    assert_eq!(tok.eos_id(), opt_id(&m["eos_id"]), "{name}: eos_id");
    assert_eq!(tok.pad_id(), opt_id(&m["pad_id"]), "{name}: pad_id");

    let cases = m["cases"].as_array().unwrap();
    let mut stream = TextStream::new();
    for c in cases {
        let ids = ids(&c["ids"]);
        let want = c["text"].as_str().unwrap();
        let got = tok.decode(&ids).unwrap_or_else(|e| panic!("{name}: {ids:?}: {e}"));
        assert_eq!(got, want, "{name}: decode {ids:?}");
        // the same stream, reused: finish() starts a new text
        assert_eq!(stream_text(tok, &mut stream, &ids), want, "{name}: stream {ids:?}");
    }

    // Out of range: refused, by every entry point.
    assert!(m["out_of_range_refused"].as_bool().unwrap());
    for bad in [vec![n as u32], vec![0, n as u32 + 5], vec![u32::MAX]] {
        match tok.decode(&bad) {
            Err(Error::Tokenizer(msg)) => assert!(msg.contains("out of range"), "{msg}"),
            other => panic!("{name}: decode {bad:?} gave {other:?}"),
        }
    }
    assert!(matches!(tok.decode_piece(n as u32), Err(Error::Tokenizer(_))));
    let mut s = TextStream::new();
    assert!(matches!(s.push(tok, n as u32), Err(Error::Tokenizer(_))));
    cases.len()
}

#[test]
fn trained_models_decode_like_sentencepiece() {
    let g = golden();
    let mut checked = 0;
    for m in models(&g).iter().filter(|m| m["file"].is_string()) {
        let name = m["name"].as_str().unwrap();
        let tok = TextTokenizer::from_bytes(&model_bytes(m)).unwrap_or_else(|e| panic!("{name}: {e}"));
        checked += check_loaded(name, &tok, m);

        // What one token adds after text: decode_ids([anchor, id]) minus decode_ids([anchor]).
        let per_token = m["per_token"].as_array().unwrap();
        for (id, want) in per_token.iter().enumerate() {
            assert_eq!(tok.decode_piece(id as u32).unwrap(), want.as_str().unwrap(), "{name}: decode_piece({id})");
        }
    }
    assert_eq!(checked, 793 + 794 + 347, "case count changed: regenerate or update");
}

#[test]
fn trained_models_exercise_every_feature() {
    // The golden data really covers byte fallback, control, unknown, user-defined pieces and
    // invalid UTF-8 (so the exact-match test above means something).
    let g = golden();
    let m = &models(&g)[0];
    assert_eq!(m["name"], "spm_test");
    let tok = TextTokenizer::from_bytes(&model_bytes(m)).unwrap();
    assert!(tok.byte_fallback());
    let kinds: Vec<PieceType> = (0..tok.piece_count() as u32).map(|i| tok.piece_type(i).unwrap()).collect();
    for k in [PieceType::Normal, PieceType::Unknown, PieceType::Control, PieceType::UserDefined, PieceType::Byte] {
        assert!(kinds.contains(&k), "{k:?}");
    }
    let texts: Vec<&str> = m["cases"].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap()).collect();
    for needle in ["\u{FFFD}", " \u{2047} ", "日", "😀", "é"] {
        assert!(texts.iter().any(|t| t.contains(needle)), "no case decodes to {needle:?}");
    }
    // The user-defined symbols the script trains with (the binding cannot report them).
    let user: Vec<&str> =
        (0..tok.piece_count() as u32).filter(|&i| kinds[i as usize] == PieceType::UserDefined).map(|i| tok.piece(i).unwrap()).collect();
    assert_eq!(user, ["<user>", "\u{2581}hello"]);
    // Byte pieces spelling U+2581 give U+2581, not a space (the hand-built models have such
    // cases; sentencepiece encodes "Hello world." there with byte pieces only).
    let hb = models(&g).iter().find(|m| m["name"] == "merged_trainer_specs").unwrap();
    assert!(hb["cases"].as_array().unwrap().iter().any(|c| c["text"] == "\u{2581}Hello\u{2581}world."));
    // Kyutai's id layout: <unk> 0, <s> 1, </s> 2, <pad> 3.
    assert_eq!((tok.unk_id(), tok.bos_id(), tok.eos_id(), tok.pad_id()), (Some(0), Some(1), Some(2), Some(3)));
    assert_eq!(tok.decode(&[0]).unwrap(), " \u{2047} ");
}

#[test]
fn moshi_padding_produces_no_text() {
    let g = golden();
    assert!(TextTokenizer::is_padding(3, 3));
    assert!(TextTokenizer::is_padding(END_OF_TEXT_PADDING_ID, 3));
    assert!(!TextTokenizer::is_padding(1, 3) && !TextTokenizer::is_padding(2, 3) && !TextTokenizer::is_padding(4, 3));
    let mut with_padding = 0;
    for m in models(&g).iter().filter(|m| m["moshi_padding"].is_array()) {
        let name = m["name"].as_str().unwrap();
        let pad = ids(&m["moshi_padding"])[1];
        let tok = TextTokenizer::from_bytes(&model_bytes(m)).unwrap();
        let mut stream = TextStream::new().skip_padding(pad);
        assert_eq!(stream.push(&tok, 0).unwrap(), "");
        assert_eq!(stream.push(&tok, pad).unwrap(), "");
        assert_eq!(stream.finish(), "");
        for c in m["cases"].as_array().unwrap() {
            let ids = ids(&c["ids"]);
            // Python: decode_ids of the ids without 0 and the padding id.
            let want = c.get("without_padding").unwrap_or(&c["text"]).as_str().unwrap();
            if c.get("without_padding").is_some() {
                with_padding += 1;
            }
            assert_eq!(stream_text(&tok, &mut stream, &ids), want, "{name}: {ids:?}");
            let kept: Vec<u32> = ids.iter().copied().filter(|&i| !TextTokenizer::is_padding(i, pad)).collect();
            assert_eq!(tok.decode(&kept).unwrap(), want, "{name}: {ids:?}");
        }
    }
    assert!(with_padding > 50, "{with_padding}");
}

#[test]
fn hand_built_models_load_exactly_when_sentencepiece_does() {
    let g = golden();
    let mut loaded = 0;
    let mut refused = 0;
    for m in models(&g).iter().filter(|m| m["base64"].is_string()) {
        let name = m["name"].as_str().unwrap();
        let res = TextTokenizer::from_bytes(&model_bytes(m));
        if m["loads"].as_bool().unwrap() {
            let tok = res.unwrap_or_else(|e| panic!("{name}: sentencepiece loads it, we refuse: {e}"));
            check_loaded(name, &tok, m);
            loaded += 1;
        } else {
            match res {
                Err(Error::Tokenizer(msg)) => assert!(!msg.is_empty()),
                Err(e) => panic!("{name}: wrong error variant {e:?}"),
                Ok(_) => panic!("{name}: sentencepiece refuses it ({}), we load it", m["python_error"]),
            }
            refused += 1;
        }
    }
    assert!(loaded >= 25 && refused >= 25, "{loaded} loaded, {refused} refused");
}

#[test]
fn errors_name_what_is_wrong() {
    let g = golden();
    let expect = [
        ("empty", "UNKNOWN"),
        ("no_unk", "UNKNOWN"),
        ("two_unk", "both have type UNKNOWN"),
        ("empty_piece", "piece 3 is empty"),
        ("duplicate_normal", "already defined"),
        ("byte_piece_without_fallback", "byte_fallback is false"),
        ("fallback_missing_byte", "no byte piece <0xFF>"),
        ("lowercase_byte_piece", "`<0xab>`"),
        ("unigram_reserved_only", "no normal"),
        ("field_number_zero", "field number 0"),
        ("wire_type_6", "wire type 6"),
        ("end_group_at_top", "without a start"),
        ("unterminated_group", "not closed"),
        ("truncated_varint", "varint runs past the end"),
        ("eleven_byte_varint", "longer than 10 bytes"),
        ("length_past_end", "runs past the end"),
        ("piece_submessage_garbage", "ModelProto.pieces[3]"),
        ("trainer_spec_garbage", "ModelProto.trainer_spec"),
    ];
    for (name, needle) in expect {
        let m = models(&g).iter().find(|m| m["name"] == name).unwrap_or_else(|| panic!("{name}"));
        match TextTokenizer::from_bytes(&model_bytes(m)) {
            Err(e @ Error::Tokenizer(_)) => {
                let msg = e.to_string();
                assert!(msg.contains(needle), "{name}: {msg:?} lacks {needle:?}");
                assert!(msg.starts_with("text tokenizer: "), "{msg}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn truncated_models_load_exactly_when_sentencepiece_does() {
    let g = golden();
    for m in models(&g).iter().filter(|m| m["file"].is_string()) {
        let name = m["name"].as_str().unwrap();
        let bytes = model_bytes(m);
        let ok: Vec<(usize, usize)> = m["loading_prefixes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_u64().unwrap() as usize, p[1].as_u64().unwrap() as usize))
            .collect();
        for k in 0..bytes.len() {
            let want = ok.iter().find(|(len, _)| *len == k).map(|(_, n)| *n);
            match (TextTokenizer::from_bytes(&bytes[..k]), want) {
                (Ok(tok), Some(n)) => assert_eq!(tok.piece_count(), n, "{name}[..{k}]"),
                (Err(Error::Tokenizer(_)), None) => {}
                (got, want) => panic!("{name}[..{k}]: got {:?}, sentencepiece {want:?}", got.map(|t| t.piece_count())),
            }
        }
    }
}

fn digest(tok: &TextTokenizer) -> String {
    let n = tok.piece_count() as u32;
    let mut lines: Vec<String> = (0..n)
        .map(|i| {
            let t = match tok.piece_type(i).unwrap() {
                PieceType::UserDefined => "normal", // as the binding reports it
                t => t.name(),
            };
            format!("{}\t{}\t{}", tok.piece(i).unwrap(), t, tok.decode(&[i]).unwrap())
        })
        .collect();
    lines.push(tok.decode(&(0..n).collect::<Vec<_>>()).unwrap());
    Sha256::digest(lines.join("\n").as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn corrupted_models_match_sentencepiece() {
    let g = golden();
    let (mut loads, mut refused, mut non_utf8) = (0, 0, 0);
    for m in models(&g).iter().filter(|m| m["file"].is_string()) {
        let name = m["name"].as_str().unwrap();
        let bytes = model_bytes(m);
        assert_eq!(digest(&TextTokenizer::from_bytes(&bytes).unwrap()), m["digest"].as_str().unwrap(), "{name}");
        for c in m["corruptions"].as_array().unwrap() {
            let pos = c["pos"].as_u64().unwrap() as usize;
            let mut bad = bytes.clone();
            bad[pos] = c["byte"].as_u64().unwrap() as u8;
            let res = TextTokenizer::from_bytes(&bad);
            let at = format!("{name}: byte {pos} := {}", c["byte"]);
            if !c["loads"].as_bool().unwrap() {
                assert!(matches!(res, Err(Error::Tokenizer(_))), "{at}: sentencepiece refuses, we load");
                refused += 1;
            } else if c["invalid_utf8"].as_bool() == Some(true) {
                // sentencepiece loads it but cannot give the piece back as text; refused here.
                match res {
                    Err(Error::Tokenizer(msg)) => assert!(msg.contains("UTF-8"), "{at}: {msg}"),
                    other => panic!("{at}: {:?}", other.map(|t| t.piece_count())),
                }
                non_utf8 += 1;
            } else {
                let tok = res.unwrap_or_else(|e| panic!("{at}: sentencepiece loads, we refuse: {e}"));
                assert_eq!(digest(&tok), c["digest"].as_str().unwrap(), "{at}");
                loads += 1;
            }
        }
    }
    assert!(loads > 100 && refused > 100 && non_utf8 > 10, "{loads} {refused} {non_utf8}");
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let g = golden();
    for c in g["garbage"].as_array().unwrap() {
        let bytes = base64(c["base64"].as_str().unwrap());
        let res = TextTokenizer::from_bytes(&bytes);
        assert_eq!(res.is_ok(), c["loads"].as_bool().unwrap(), "{bytes:?}");
        assert!(res.is_ok() || matches!(res, Err(Error::Tokenizer(_))));
    }
    assert!(matches!(TextTokenizer::from_bytes(&[]), Err(Error::Tokenizer(w)) if w.contains("the file is empty")));
    // More garbage, and garbage after a valid model, without a reference: any result but a
    // panic (xorshift, seeded).
    let model = MODEL_FILES[0].1;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..3000 {
        let len = (next() % 300) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if i % 2 == 0 {
            let mut v = model.to_vec();
            v.append(&mut b);
            b = v;
        }
        let _ = TextTokenizer::from_bytes(&b);
    }
}

/// A minimal protobuf writer for models the reference cannot check.
fn ld(field: u8, data: &[u8]) -> Vec<u8> {
    assert!(data.len() < 128 && field < 16);
    let mut v = vec![field << 3 | 2, data.len() as u8];
    v.extend_from_slice(data);
    v
}

fn piece(p: &[u8], typ: u8) -> Vec<u8> {
    let mut body = ld(1, p);
    body.extend_from_slice(&[3 << 3, typ]);
    ld(1, &body)
}

#[test]
fn models_this_reader_refuses_on_purpose() {
    let mut base = piece(b"<unk>", 2);
    base.extend(piece(b"a", 1));
    assert_eq!(TextTokenizer::from_bytes(&base).unwrap().decode(&[1, 0]).unwrap(), "a \u{2047} ");

    // A piece that is not UTF-8.
    let mut m = base.clone();
    m.extend(piece(b"\xff\xfe", 1));
    match TextTokenizer::from_bytes(&m) {
        Err(Error::Tokenizer(msg)) => assert!(msg.contains("piece 2 is not UTF-8"), "{msg}"),
        other => panic!("{:?}", other.map(|t| t.piece_count())),
    }
    // Denormalization rules (a non-empty denormalizer_spec.precompiled_charsmap).
    let mut m = base.clone();
    m.extend(ld(5, &ld(2, b"\x01\x02\x03\x04")));
    match TextTokenizer::from_bytes(&m) {
        Err(Error::Tokenizer(msg)) => assert!(msg.contains("denormalizer_spec"), "{msg}"),
        other => panic!("{:?}", other.map(|t| t.piece_count())),
    }
    // An empty charsmap is no rule: fine.
    let mut m = base.clone();
    m.extend(ld(5, &ld(2, b"")));
    assert!(TextTokenizer::from_bytes(&m).is_ok());
}

#[test]
fn stream_emits_characters_when_complete() {
    let g = golden();
    let m = &models(&g)[0];
    let tok = TextTokenizer::from_bytes(&model_bytes(m)).unwrap();
    let byte = |b: u8| {
        (0..tok.piece_count() as u32).find(|&i| tok.piece(i) == Some(format!("<0x{b:02X}>").as_str())).unwrap()
    };
    let mut s = TextStream::new();
    // 😀 = F0 9F 98 80: nothing until the last byte.
    assert_eq!(s.push(&tok, byte(0xF0)).unwrap(), "");
    assert_eq!(s.push(&tok, byte(0x9F)).unwrap(), "");
    assert_eq!(s.push(&tok, byte(0x98)).unwrap(), "");
    assert_eq!(s.push(&tok, byte(0x80)).unwrap(), "😀");
    // A stray continuation byte is decided at once; a cut sequence at the end.
    assert_eq!(s.push(&tok, byte(0x80)).unwrap(), "\u{FFFD}");
    assert_eq!(s.push(&tok, byte(0xE6)).unwrap(), "");
    assert_eq!(s.push(&tok, byte(0x41)).unwrap(), "\u{FFFD}A");
    assert_eq!(s.push(&tok, byte(0xE6)).unwrap(), "");
    assert_eq!(s.finish(), "\u{FFFD}");
    // An out-of-range id leaves the stream as it was.
    assert_eq!(s.push(&tok, byte(0xC3)).unwrap(), "");
    assert!(s.push(&tok, tok.piece_count() as u32).is_err());
    assert_eq!(s.push(&tok, byte(0xA9)).unwrap(), "é");
}
