#!/usr/bin/env python3
"""Makes the serving tests' tokenizer: a 64-token BPE (SentencePiece-style word boundaries,
`Metaspace`) trained by Hugging Face `tokenizers` on a few sentences, for the 64-token test
decoders (decoder_rows and its kin), and the cases the tests check against this library:

- tokenizer.json: the tokenizer, as `serve --tokenizer` reads it;
- cases.json: `encode` (texts and their ids), and `continuations`: for each request of
  decoder_rows' references (its prompt ids and the 16 tokens eager decodes for it), the text
  of the tokens as a continuation of the prompt — `decode(tail + tokens)` less `decode(tail)`,
  `tail` the prompt's last 5 ids — which is what a completion's `text` must be.

    testdata-venv/bin/python testdata/tokenizer/make.py
"""
import json
import os

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = os.path.join(HERE, "..", "models", "decoder_rows")
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a compiler turns a program into another program that does the same thing faster",
    "every bucket holds the sizes of a dynamic dim and pads them to its edge",
    "weights stream from the archive at the speed of a copy",
    "the server batches the requests of many clients in the slots of one step",
    "pack my box with five dozen liquor jugs",
]
# Tokens of the prompt that a continuation is decoded after (as servers do: a word's leading
# space depends on what comes before it).
TAIL = 5


def main():
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=64, special_tokens=["[UNK]"], show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    assert tok.get_vocab_size() == 64, tok.get_vocab_size()
    tok.save(os.path.join(HERE, "tokenizer.json"))

    texts = ["the lazy dog", "a program faster than the fox", "caf\u00e9 au lait", "", "  two  spaces"]
    encode = [{"text": t, "ids": tok.encode(t).ids} for t in texts]
    prompts, tokens = np.load(os.path.join(ROWS, "prompts.npy")), np.load(os.path.join(ROWS, "tokens.npy"))
    continuations = []
    for prompt, new in zip(prompts.tolist(), tokens.tolist()):
        prompt = [t for t in prompt if t >= 0]
        tail = prompt[-TAIL:]
        text = tok.decode(tail + new)[len(tok.decode(tail)):]
        continuations.append({"prompt": prompt, "tokens": new, "text": text})
    chat = chat_cases(tok)
    line = lambda case: "  " + json.dumps(case, ensure_ascii=False)
    with open(os.path.join(HERE, "cases.json"), "w") as f:
        f.write(f'{{"tail": {TAIL},\n "encode": [\n' + ",\n".join(map(line, encode)) + "\n ],\n")
        f.write(' "continuations": [\n' + ",\n".join(map(line, continuations)) + "\n ],\n")
        f.write(' "chat": [\n' + ",\n".join(map(line, chat)) + "\n ]}\n")
    print("wrote tokenizer.json, tokenizer_config.json and cases.json")


CONVERSATIONS = [
    [{"role": "user", "content": "the lazy dog"}],
    [{"role": "system", "content": "  every bucket holds the sizes "}, {"role": "user", "content": "the fox"}],
    [{"role": "user", "content": "pack my box"}, {"role": "assistant", "content": "with five dozen jugs"},
     {"role": "user", "content": "a copy faster"}],
]


def chat_cases(tok):
    """Each conversation rendered by transformers' `apply_chat_template` (add_generation_prompt)
    with chat_template.jinja: `text` without a BOS token, `text_config` with the one
    tokenizer_config.json (written here, holding the same template) names, and `ids`: the
    latter tokenized without special tokens, as a chat prompt is."""
    from transformers import PreTrainedTokenizerFast

    template = open(os.path.join(HERE, "chat_template.jinja")).read()
    config = {"chat_template": template, "bos_token": "the", "eos_token": {"content": "▁do", "special": True}}
    with open(os.path.join(HERE, "tokenizer_config.json"), "w") as f:
        f.write(json.dumps(config, indent=1) + "\n")
    plain = PreTrainedTokenizerFast(tokenizer_object=tok)
    with_bos = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="the", eos_token="▁do")
    cases = []
    for messages in CONVERSATIONS:
        render = lambda t: t.apply_chat_template(messages, chat_template=template, tokenize=False,
                                                 add_generation_prompt=True)
        text, text_config = render(plain), render(with_bos)
        ids = tok.encode(text_config, add_special_tokens=False).ids
        cases.append({"messages": messages, "text": text, "text_config": text_config, "ids": ids})
    return cases


if __name__ == "__main__":
    main()
