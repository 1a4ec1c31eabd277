/*  regex.h — a backtracking regular expression over Unicode code points, for the pre-tokenizer
    patterns of Hugging Face tokenizers (GPT-2, Llama 3, Qwen2/3).
    Threading: a compiled regex never changes; any number of threads may match with it at once.
    Lifetime: caller owns it until bt_regex_destroy().

    Syntax (Perl/Oniguruma semantics: ordered alternation, greedy quantifiers backtrack):
      literals, `.` (any but \n), `|`, groups `(...)`, `(?:...)`, `(?i:...)`, lookahead `(?=...)`
      and `(?!...)`, quantifiers `* + ? {m} {m,} {m,n}` and their lazy `?` forms, classes
      `[...]`/`[^...]` with ranges, `\p{X}`/`\P{X}` (X a general category: L, Lu, Ll, Lt, Lm, Lo,
      M.., N, Nd, Nl, No, P.., S.., Z.., C.., or Letter, Mark, Number, Punctuation, Symbol,
      Separator, Other), `\s \S` (the Unicode White_Space property), `\d \D` (Nd), `\w \W`
      (letters, marks, Nd, Pc), escapes `\r \n \t \f \v \0 \xHH \x{H..} \uHHHH` and escaped
      punctuation.  `^` and `$` match at the ends of the subject.  Case-insensitive groups fold
      ASCII letters only.  Anything else (backreferences, lookbehind, possessive quantifiers) is a
      compile error that names the position. */
#ifndef BATON_REGEX_H
#define BATON_REGEX_H

#include "baton/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_regex bt_regex_t;

/*  Compiles the UTF-8 pattern.  On success caller owns *out; on failure *out is NULL and the
    status is BT_EFORMAT with a message naming the byte offset and what was wrong there. */
bt_status bt_regex_compile(const char *pattern, bt_regex_t **out);
void bt_regex_destroy(bt_regex_t **self_p);

/*  Matches at cps[pos]: returns the end of the match (pos <= end <= n), or -1 when the pattern
    does not match there.  The subject is cps[0 .. n) (lookahead and `$` see all of it). */
int64_t bt_regex_match_at(const bt_regex_t *self, const uint32_t *cps, size_t n, size_t pos);

#ifdef __cplusplus
}
#endif
#endif
