"""trainbox's chat templates (src/text/jinja.cpp, chat.cpp) against jinja2 and transformers (issue 45).

Templates in the styles real checkpoints ship — ChatML, Llama-3 header tokens with a system prompt and
tools, Mistral [INST] with raise_exception on role order, Gemma turns — plus one that exercises the
engine (namespace, macros, loop.*, filters, tests, string methods, slices, block set, loop controls) and
one that renders a tools schema. Each is rendered by transformers' apply_chat_template (jinja2 in its
sandboxed environment) and by `trainbox tokenize --chat --template FILE`, on conversations with a
system prompt, several turns, Unicode and edge whitespace:
  * the text is the same, byte for byte;
  * the ids are the same (two tokenizers: a byte-level BPE and a Metaspace/byte-fallback BPE);
  * the loss mask equals transformers' assistant mask (return_assistant_tokens_mask=True) for a
    template with {% generation %} blocks; for a template without them (trainbox finds each assistant
    turn by rendering growing prefixes), it equals the mask transformers gives the same template with
    generation blocks added around each assistant turn.
Then the bad input: each exits 2 with one line naming the problem (the template's own
raise_exception text, the template line of an unsupported tag or filter, a record without the fields).
  TRAINBOX_BIN=build/bin/trainbox python tests/integration/chat_template_parity.py"""
import json
import os
import subprocess
import sys
import tempfile

from text_lib import BIN, CORPUS, LICENSES, Checks  # noqa: F401 (CORPUS, LICENSES: the texts)

check = Checks()


try:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers, Regex
    from transformers import PreTrainedTokenizerFast
except ImportError as e:
    print(f"skip: tokenizers/transformers are not installed ({e}); install deps/requirements-tools.txt")
    sys.exit(77)

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>"]
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level():
    t = Tokenizer(models.BPE(ignore_merges=True))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=1200, show_progress=False,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    t.add_special_tokens(SPECIALS)
    return PreTrainedTokenizerFast(tokenizer_object=t, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")


def metaspace():
    t = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    t.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=1000, special_tokens=["<unk>", "<s>", "</s>"],
                                                      show_progress=False, limit_alphabet=200))
    j = json.loads(t.to_str())
    for b in range(256):
        j["model"]["vocab"].setdefault(f"<0x{b:02X}>", len(j["model"]["vocab"]))
    t = Tokenizer.from_str(json.dumps(j))
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    t.add_special_tokens(["[INST]", "[/INST]"])
    return PreTrainedTokenizerFast(tokenizer_object=t, bos_token="<s>", eos_token="</s>")


CHATML = """{%- for message in messages %}
{%- if message['role'] == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}{% generation %}{{- message['content'] | trim }}{{- '<|im_end|>' }}{% endgeneration %}{{- '\\n' }}
{%- else %}
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

LLAMA3 = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- if messages[0]['content'] is string %}
        {%- set system_message = messages[0]['content']|trim %}
    {%- else %}
        {%- set system_message = messages[0]['content'][0]['text']|trim %}
    {%- endif %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: 26 Jul 2024\\n\\n" }}
{%- if tools is not none %}
    {{- "You have access to the following functions.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}
    {%- if message.role == 'assistant' %}
        {%- generation %}{{- message['content'] | trim + '<|eot_id|>' }}{%- endgeneration %}
    {%- else %}
        {{- message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

MISTRAL = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {% generation %}{{- ' ' + message['content'] + eos_token}}{% endgeneration %}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""

GEMMA = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
         "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
         "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
         "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
         "{% endif %}{{ '<start_of_turn>' + role + '\\n' }}{% if role == 'model' %}{% generation %}"
         "{{ message['content'] | trim + '<end_of_turn>' }}{% endgeneration %}{{ '\\n' }}{% else %}"
         "{{ message['content'] | trim + '<end_of_turn>\\n' }}{% endif %}{% endfor %}"
         "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}")

# The engine: things real templates use, each once (rendered text compared only).
FEATURES = """{#- a comment -#}
{%- set ns = namespace(n=0, seen=[], last_user='') %}
{%- macro tag(name, body='none', upper=false) -%}
<{{ name }}{% if upper %}={{ body | upper }}{% else %}={{ body }}{% endif %}>
{%- endmacro %}
{%- for m in messages if m.role != 'system' %}
  {%- set ns.n = ns.n + 1 %}
  {%- if m.role == 'user' %}{% set ns.last_user = m.content %}{% endif %}
  {{- loop.index }}/{{ loop.length }}{{ '^' if loop.first }}{{ '$' if loop.last }} {{ loop.revindex0 }}
  {{- tag(m.role, m.content[:12], upper=loop.index is divisibleby 2) }}
  {%- if loop.previtem is defined %} prev={{ loop.previtem.role }}{% endif %}
  {{- ' ' ~ loop.cycle('odd', 'even') ~ '\\n' }}
{%- endfor %}
count={{ ns.n }} last_user={{ ns.last_user | replace(' ', '_') }} {{ ns.last_user | length }}
{%- set roles = messages | map(attribute='role') | list %}
roles={{ roles | join(',') }} unique={{ roles | unique | list | length }} first={{ roles | first }} last={{ roles[-1] }}
users={{ messages | selectattr('role', 'equalto', 'user') | list | length }} others={{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | join('+') }}
{%- set words = (messages[-1].content ~ '  tail ') .split() %}
words={{ words }} {{ words | length }} rev={{ 'abc'[::-1] }} {{ [1, 2, 3, 4][1:3] }} {{ (1, 'a', none, true, 2.5) }}
{%- set d = {'b': 1, 'a': [1, 2.0, 'x'], 'c': {'k': none}} %}
d={{ d }} json={{ d | tojson }} sorted={{ d | dictsort | first }} items={% for k, v in d.items() %}{{ k }}:{{ v }};{% endfor %}
keys={{ d.keys() | list }} get={{ d.get('zz', 'dflt') }} in={{ 'a' in d }} {{ 3 in [1, 2, 3] }} {{ 'ell' in 'hello' }} {{ 'x' not in 'hello' }}
math={{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 / 3 }} {{ 1e-7 }} {{ 1.5e16 }} {{ 10 / 5 }} {{ 0.1 + 0.2 }}
str={{ '  Mixed Case  ' | trim | lower }} {{ 'hello world' | title }} {{ 'hello' | capitalize }} {{ 'a-b-c'.split('-', 1) }} {{ 'a,b,,c'.rsplit(',', 1) }}
{{- ' ' }}{{ 'Hello'.startswith(('He', 'x')) }} {{ 'Hello'.endswith('lo') }} {{ 'xxhixx'.strip('x') }} {{ '  pad'.lstrip() }} {{ 'a\\nb\\r\\nc'.splitlines() }}
{{- ' ' }}{{ 'banana'.count('an') }} {{ 'banana'.find('na') }} {{ 'banana'.rfind('na') }} {{ '-'.join(['x', 'y']) }} {{ '123'.isdigit() }} {{ ' '.isspace() }}
tests={{ none is none }} {{ 1 is number }} {{ 1.0 is float }} {{ 'x' is string }} {{ d is mapping }} {{ roles is iterable }} {{ missing is undefined }} {{ true is boolean }} {{ 3 is odd }} {{ 4 is even }}
default={{ missing | default('dflt') }} {{ '' | default('empty', true) }} {{ none | string }} {{ true }} {{ 42 | string | length }}
nums={{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [3, 1, 2] | max }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | sum }} {{ '3' | int + 1 }} {{ 2.7 | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ 2.567 | round(2) }}
range={% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %} {{ range(2, 9, 3) | list }}
{%- for x in [] %}never{% else %} empty-loop{% endfor %}
{% set block %}Block {{ messages | length }} {% endset -%}
block={{ block | trim }}|{{ block | indent(2, true) }}|
{%- if messages | length > 2 and not (messages[0].role == 'nobody' or false) %} many{% elif true %} few{% endif %}
  {%+ if true %}kept-indent{% endif %}
{% if true -%}
   stripped-after
{%- endif %}
{{ 'cond' if messages else 'none' }} {{ (messages | length) * 2 }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none }}
{%- generation %}{% endgeneration %}
"""

TOOLS = """{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- "# Tools\\n\\n<tools>" }}
{%- for tool in tools %}
{{- "\\n" }}{{- tool | tojson }}
{%- endfor %}
{{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>' + message.role + '\\n' }}
{%- generation %}
{%- if message.content %}{{- message.content }}{%- endif %}
{%- for tool_call in message.tool_calls | default([]) %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '<tool_call>\\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>' }}
{%- endgeneration %}
{{- '\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


def plain(template):
    """The same template without its generation tags (what most checkpoints ship)."""
    for tag in ("{% generation %}", "{%- generation %}", "{% endgeneration %}", "{%- endgeneration %}"):
        template = template.replace(tag, "")
    return template


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather at a place — “quoted”, ünïcode, 東京",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer",
                                                                                          "default": 3},
                                                   "scale": {"enum": ["C", "F"], "minimum": 0.5}},
                   "required": ["city"]}}}
CONVERSATIONS = {
    "one_turn": [{"role": "user", "content": "What is the GPL?"},
                 {"role": "assistant", "content": "A copyleft license."}],
    "system_two_turns": [
        {"role": "system", "content": "  You answer briefly.\n"},
        {"role": "user", "content": "Name a license.\t"},
        {"role": "assistant", "content": "The MIT license. 🙂"},
        {"role": "user", "content": "Another, in Japanese: 東京 ライセンス?"},
        {"role": "assistant", "content": "\n  Apache 2.0 — 許可 \n\n"}],
    "three_turns": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "Text with   runs of  spaces\r\nand CRLF"},
        {"role": "assistant", "content": "Done.\n\nTwo paragraphs, tabs\there."},
        {"role": "user", "content": "ok"}, {"role": "assistant", "content": "Bye!"}],
}
TOOL_CONVERSATION = [
    {"role": "system", "content": "Use tools."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
    {"role": "tool", "content": "{\"temp\": 21.5}"},
    {"role": "assistant", "content": "It is 21.5 °C in Paris."}]

# name → (template, tokenizer, conversations, compare ids/mask)
CASES = {
    "chatml": (CHATML, "bl", list(CONVERSATIONS), True),
    "chatml_plain": (plain(CHATML), "bl", list(CONVERSATIONS), True),
    "llama3": (LLAMA3, "bl", list(CONVERSATIONS) + ["tools"], True),
    "llama3_plain": (plain(LLAMA3), "bl", list(CONVERSATIONS) + ["tools"], True),
    "mistral": (MISTRAL, "ms", list(CONVERSATIONS), True),
    "mistral_plain": (plain(MISTRAL), "ms", list(CONVERSATIONS), True),
    "gemma_plain": (plain(GEMMA), "bl", ["one_turn", "three_turns"], True),
    "features": (FEATURES, "bl", list(CONVERSATIONS), False),
    "tools": (TOOLS, "bl", ["tools_chatml"] + list(CONVERSATIONS), True),
    "tools_plain": (plain(TOOLS), "bl", ["tools_chatml"] + list(CONVERSATIONS), True),
}


def conversation(name):
    if name == "tools":
        return CONVERSATIONS["system_two_turns"], [WEATHER]
    if name == "tools_chatml":
        return TOOL_CONVERSATION, [WEATHER, {"type": "function", "function": {"name": "noop", "parameters": {}}}]
    return CONVERSATIONS[name], None


def hf(tok, template, messages, tools, generation_prompt=False, mask=True):
    text = tok.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=False,
                                   add_generation_prompt=generation_prompt)
    out = tok.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=True, return_dict=True,
                                  add_generation_prompt=generation_prompt, return_assistant_tokens_mask=mask)
    ids = list(out["input_ids"])
    return text, ids, list(out["assistant_masks"]) if mask else None


def ours(folder, template_path, records, extra=()):
    p = subprocess.run([BIN, "tokenize", folder, "--chat", "--template", template_path, *extra],
                       input="".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                       capture_output=True, text=True, timeout=120)
    return p.returncode, [json.loads(l) for l in p.stdout.splitlines() if l.strip()], p.stderr.strip()


def main():
    tmp = tempfile.mkdtemp(prefix="trainbox-chat-")
    toks = {"bl": byte_level(), "ms": metaspace()}
    folders = {}
    for key, tok in toks.items():
        folders[key] = os.path.join(tmp, key)
        tok.save_pretrained(folders[key])
    checked = 0
    for name, (template, key, convs, compare_ids) in CASES.items():
        tok = toks[key]
        tpath = os.path.join(tmp, name + ".jinja")
        with open(tpath, "w") as f:
            f.write(template)
        twin = CASES[name[:-len("_plain")]][0] if name.endswith("_plain") and name[:-6] in CASES else None
        if name == "gemma_plain":
            twin = GEMMA
        for prompt in (False, True):
            records, expected = [], []
            for cname in convs:
                messages, tools = conversation(cname)
                rec = {"messages": messages}
                if tools is not None:
                    rec["tools"] = tools
                records.append(rec)
                use_mask = compare_ids and not prompt
                text, ids, mask = hf(tok, template, messages, tools, prompt, mask=use_mask and twin is None)
                if use_mask and twin is not None:
                    _, twin_ids, mask = hf(tok, twin, messages, tools, prompt, mask=True)
                    check(twin_ids == ids, f"{name}/{cname}: the tagged twin gives the same ids")
                expected.append((cname, text, ids, mask))
            rc, got, err = ours(folders[key], tpath, records, ["--add-generation-prompt"] if prompt else [])
            check(rc == 0 and len(got) == len(records), f"{name}: trainbox renders {len(records)} conversations"
                  f"{' with the generation prompt' if prompt else ''}", err)
            for (cname, text, ids, mask), g in zip(expected, got):
                check(g["text"] == text, f"{name}/{cname}{'+prompt' if prompt else ''}: the text equals jinja2's",
                      f"ours {g['text']!r}\n     hf   {text!r}")
                checked += 1
                if compare_ids:
                    check(g["ids"] == ids, f"{name}/{cname}{'+prompt' if prompt else ''}: the ids equal transformers'",
                          f"ours {g['ids'][:40]} hf {ids[:40]}")
                if mask is not None:
                    check(sum(mask) > 0 and g["mask"] == mask,
                          f"{name}/{cname}: the loss mask equals transformers' assistant mask ({sum(mask)} tokens)",
                          f"ours {g['mask']}\n     hf   {mask}")
    # every case x conversation x (without, with the generation prompt): docs/tokenizers.md says 66
    check(checked == 66, f"{checked} renders compared (66, as docs/tokenizers.md says)")

    # prompt/completion and text records: the mask starts at the completion, eos ends both
    bl = toks["bl"]
    rc, got, err = ours(folders["bl"], os.path.join(tmp, "chatml.jinja"),
                        [{"prompt": "Q: what is a license?\nA:", "completion": " A grant of rights."},
                         {"text": "Plain text for continued pre-training."}])
    pc = bl("Q: what is a license?\nA: A grant of rights.")["input_ids"] + [bl.eos_token_id]
    n_prompt = len(bl("Q: what is a license?\nA:")["input_ids"])
    check(rc == 0 and got[0]["ids"] == pc, "prompt/completion: the ids of prompt+completion, then eos", err)
    check(rc == 0 and got[0]["mask"] == [0] * n_prompt + [1] * (len(pc) - n_prompt),
          "prompt/completion: the mask covers the completion and eos only")
    txt = bl("Plain text for continued pre-training.")["input_ids"] + [bl.eos_token_id]
    check(rc == 0 and got[1]["ids"] == txt and got[1]["mask"] == [1] * len(txt), "text: every token a target, eos last")

    # --- bad input: exit 2, one line, the problem named ---
    def refused(records, template, want, what, folder=None, raw=None):
        tpath = os.path.join(tmp, "bad.jinja")
        with open(tpath, "w") as f:
            f.write(template)
        stdin = raw if raw is not None else "".join(json.dumps(r) + "\n" for r in records)
        p = subprocess.run([BIN, "tokenize", folder or folders["bl"], "--chat", "--template", tpath],
                           input=stdin, capture_output=True, text=True, timeout=60)
        first = p.stderr.strip().splitlines()[0] if p.stderr.strip() else ""
        check(p.returncode == 2 and all(w in first for w in want), f"refused: {what}",
              f"rc {p.returncode}: {p.stderr.strip()}")

    swapped = [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]
    refused([{"messages": swapped}], MISTRAL, ["stdin:1", "roles must alternate user/assistant"],
            "the template's raise_exception text is shown, with the line of input")
    refused([{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "x"}]}], GEMMA,
            ["stdin:1", "System role not supported"], "Gemma's own refusal of a system role")
    refused([{"messages": swapped}], "line one\n{% include 'other.jinja' %}", ["line 2", "include"],
            "an unsupported tag names the template line")
    refused([{"messages": swapped}], "{{ messages | frobnicate }}", ["line 1", "frobnicate"],
            "an unknown filter is named with its line")
    refused([{"messages": swapped}], "{% for m in messages %}{{ m.role }", ["line 1"], "an unclosed tag")
    refused([{"messages": swapped}], "{% if true %}open", ["endif"], "a missing endif")
    refused([{"messages": swapped}], "{% set x = [] %}{{ x.append(1) }}", ["append"],
            "list.append, refused as transformers' sandbox refuses it")
    refused([{"messages": swapped}], "{{ messages[0].nope.deeper }}", ["line 1", "undefined"],
            "an attribute of an undefined value")
    refused([{"nothing": 1}], CHATML, ["stdin:1", "\"text\"", "\"messages\""], "a record without the fields")
    refused([{"prompt": "p"}], CHATML, ["stdin:1", "completion"], "a prompt without its completion")
    refused([{"messages": "hi"}], CHATML, ["stdin:1", "messages"], "messages that are not a list")
    refused([{"messages": [{"content": "no role"}]}], CHATML, ["stdin:1", "role"], "a message without a role")
    refused([], CHATML, ["stdin:2", "not JSON"], "a line that is not JSON", raw='{"text": "ok"}\n{oops\n')
    rewriting = ("{% for m in messages %}{% if m.role == 'assistant' and not loop.last %}[old]"
                 "{% else %}<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}")
    refused([{"messages": CONVERSATIONS["three_turns"]}], rewriting, ["growing prefixes", "messages[1]"],
            "a template that rewrites earlier turns (no generation tags): masks refused, not guessed")
    p = subprocess.run([BIN, "tokenize", folders["bl"], "--chat"], input=json.dumps({"messages": swapped}) + "\n",
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "no chat template" in p.stderr, "a tokenizer without a chat template, named",
          p.stderr.strip())
    print(f"{'FAILED' if check.bad else 'passed'}: {check.bad} of the checks failed")
    return 1 if check.bad else 0


if __name__ == "__main__":
    sys.exit(main())
