"""Reference renderings for the chat template tests: the Hugging Face
templates of each family (their plain-conversation parts, tool branches left
out), rendered with jinja2 the way transformers does (trim_blocks,
lstrip_blocks, raise_exception). usage: chat_template_ref.py OUT.json"""
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

LLAMA3 = (r"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          r"'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
          r"'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
          r"{{ content }}{% endfor %}{% if add_generation_prompt %}"
          r"{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

QWEN25 = r"""{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- else %}
    {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant") %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

QWEN3 = r"""{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

SMOLLM2 = (r"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
           r"{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
           r"<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
           r"'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
           r"{% endif %}")

CHATML = (r"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          r"'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
          r"{% endif %}")

LLAMA2 = (r"{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
          r"messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
          r"{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          r"{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          r"{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + "
          r"'\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
          r"{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
          r"{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
          r"{% endfor %}")

MISTRAL = (r"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
           r"{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
           r"{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
           r"{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
           r"{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")

FAMILIES = {
    "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>", True),
    "qwen25": (QWEN25, "<|endoftext|>", "<|im_end|>", True),
    "qwen3": (QWEN3, "<|endoftext|>", "<|im_end|>", True),
    "smollm2": (SMOLLM2, "<|im_start|>", "<|im_end|>", True),
    "chatml": (CHATML, "<|endoftext|>", "<|im_end|>", True),
    "llama2": (LLAMA2, "<s>", "</s>", True),
    "mistral": (MISTRAL, "<s>", "</s>", False),
}

S = {"role": "system", "content": "You are terse.\n"}
U1 = {"role": "user", "content": "  Hello there! \n"}
A1 = {"role": "assistant", "content": " Hi. How can I help?"}
A1T = {"role": "assistant", "content": "<think>\nthe user greets\n</think>\n\nHi. How can I help?"}
U2 = {"role": "user", "content": "Write 2+2=?\nAnd 日本語 👍"}
A2 = {"role": "assistant", "content": "4"}
CONVERSATIONS = [[U1], [S, U1], [U1, A1, U2], [S, U1, A1, U2], [S, U1, A1T, U2, A2], [U1, A1T], [U1, A1]]


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.globals["raise_exception"] = raise_exception
out = {}
for name, (template, bos, eos, system_ok) in FAMILIES.items():
    cases = []
    for conv in CONVERSATIONS:
        if not system_ok and conv[0]["role"] == "system":
            continue
        for gen in (True, False):
            text = env.from_string(template).render(messages=conv, add_generation_prompt=gen, bos_token=bos,
                                                    eos_token=eos)
            cases.append({"messages": conv, "add_generation_prompt": gen, "text": text})
    out[name] = {"template": template, "bos": bos, "eos": eos, "cases": cases}
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False)
