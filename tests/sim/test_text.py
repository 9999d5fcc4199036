from gateway.sim.text import IMAGE_TOKENS, OutputText, chat_prompt, count_text_tokens, make_prompt

ENGLISH = (
    "Speculative decoding helps single-user decode and chat, but it hurts long-context concurrent "
    "prefill on this hardware, so the gateway measures which configuration wins for each workload."
)


def test_english_prose_counts_roughly_four_characters_per_token() -> None:
    chars_per_token = len(ENGLISH) / count_text_tokens(ENGLISH)
    assert 3.3 <= chars_per_token <= 4.8


def test_make_prompt_has_exactly_the_requested_token_count() -> None:
    for n in (1, 17, 512, 8192):
        assert count_text_tokens(make_prompt(n, seed=n)) == n


def test_chat_prompt_counts_template_overhead_and_images_only_for_vision() -> None:
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hello"}, {"type": "image_url", "image_url": {"url": "x"}}],
        }
    ]
    text_only = chat_prompt(messages, count_images=False)
    vision = chat_prompt(messages, count_images=True)
    assert text_only.images == vision.images == 1
    assert vision.tokens - text_only.tokens == IMAGE_TOKENS
    assert text_only.tokens > count_text_tokens("hello")


def test_greedy_output_ignores_seed_and_sampled_output_follows_it() -> None:
    greedy = [OutputText("m", "p", seed, 0.0).span(0, 20) for seed in (1, 2)]
    assert greedy[0] == greedy[1]
    assert OutputText("m", "p", 1, 0.7).span(0, 20) == OutputText("m", "p", 1, 0.7).span(0, 20)
    assert OutputText("m", "p", 1, 0.7).span(0, 20) != OutputText("m", "p", 2, 0.7).span(0, 20)
    assert OutputText("m", "p", 1, 0.0).span(0, 20) != OutputText("other", "p", 1, 0.0).span(0, 20)


def test_output_text_recounts_to_the_number_of_generated_tokens() -> None:
    out = OutputText("m", "prompt", None, 0.0)
    assert count_text_tokens(out.span(0, 300)) == 300
    assert out.span(0, 10) + out.span(10, 5) == out.span(0, 15)
