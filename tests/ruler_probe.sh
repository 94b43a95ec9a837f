# ruler_probe.sh: sourced by the tests that write RULER task lines by hand. probe_ids SPINDLE MODEL WORK
# prints the ids (comma-separated) of a one-turn chat prompt, "Repeat after me: the secret code is 4417.",
# in MODEL's tokenizer (spindle tokenize; WORK/p.txt and WORK/p.ids are its files).
probe_ids() {
    printf '<|im_start|>user\nRepeat after me: the secret code is 4417.<|im_end|>\n<|im_start|>assistant\n' >"$3/p.txt"
    "$1" tokenize --model "$2" --text "$3/p.txt" --out "$3/p.ids" 2>/dev/null
    tr -s ' \n,' ',' <"$3/p.ids" | sed 's/^,//; s/,$//'
}
