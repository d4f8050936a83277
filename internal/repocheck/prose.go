package main

import (
	"regexp"
	"strings"
)

// proseStats counts the prose of a markdown text. It counts the sentences of three words or more,
// their words, and the sentences over 40 words.
type proseStats struct {
	sentences, words, long int
}

func (p proseStats) add(q proseStats) proseStats {
	return proseStats{p.sentences + q.sentences, p.words + q.words, p.long + q.long}
}

// perSentence is the average number of words a sentence.
func (p proseStats) perSentence() float64 {
	if p.sentences == 0 {
		return 0
	}
	return float64(p.words) / float64(p.sentences)
}

var (
	inlineCode = regexp.MustCompile("`[^`]*`")
	link       = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	// A sentence ends at . ! or ? before a space and a capital, a backtick, *, ( or [.
	sentenceEnd = regexp.MustCompile("[.!?] +[A-Z`*(\\[]")
	listItem    = regexp.MustCompile(`^\s*([-*+]|[0-9]+\.) `)
)

// measureProse counts the prose of a markdown text. It skips fenced code and blank lines.
// It skips the lines that start with |, # or four spaces too.
// Inline code counts as one word and a link as its text.
// The lines of a paragraph or list item are read as one: a sentence wrapped over lines counts once.
// A paragraph or item ends every sentence in it.
func measureProse(text string) proseStats {
	var st proseStats
	for _, para := range paragraphs(text) {
		for _, s := range sentences(para) {
			st = st.count(s)
		}
	}
	return st
}

// count adds one sentence to the stats, if it has three words or more.
func (p proseStats) count(sentence string) proseStats {
	n := wordCount(sentence)
	if n < 3 {
		return p
	}
	p.sentences++
	p.words += n
	if n > 40 {
		p.long++
	}
	return p
}

// sentences splits one paragraph, read as one line, into its sentences. Inline code becomes one
// word and a link its text.
func sentences(para string) []string {
	para = inlineCode.ReplaceAllString(para, "code")
	para = link.ReplaceAllString(para, "$1")
	return splitSentences(para)
}

// wordCount is the number of words of a sentence: its runs of non-space characters.
func wordCount(sentence string) int {
	return len(strings.Fields(sentence))
}

// paragraphs returns the prose paragraphs and list items of text, each on one line.
func paragraphs(text string) []string {
	var out []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.Join(cur, " "))
			cur = nil
		}
	}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fenced = !fenced
			flush()
			continue
		}
		if fenced || trimmed == "" || strings.HasPrefix(line, "|") || strings.HasPrefix(line, "#") ||
			strings.HasPrefix(line, "    ") {
			flush()
			continue
		}
		if listItem.MatchString(line) {
			flush()
		}
		cur = append(cur, trimmed)
	}
	flush()
	return out
}

func splitSentences(para string) []string {
	var out []string
	for {
		loc := sentenceEnd.FindStringIndex(para)
		if loc == nil {
			return append(out, para)
		}
		out = append(out, para[:loc[0]+1])
		para = para[loc[1]-1:]
	}
}
