package main

import (
	"regexp"
	"strings"
)

// proseStats counts the prose of a markdown text: the sentences of three words or more, their
// words, and the sentences over 40 words.
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
	// A sentence ends at . ! or ? followed by a space and a capital, a backtick, *, ( or [.
	sentenceEnd = regexp.MustCompile("[.!?] +[A-Z`*(\\[]")
	listItem    = regexp.MustCompile(`^\s*([-*+]|[0-9]+\.) `)
)

// measureProse counts the prose of a markdown text. It skips fenced code, blank lines and lines
// that start with |, # or four spaces; inline code counts as one word and a link as its text.
// The lines of a paragraph or list item are read as one, so a sentence wrapped over several lines
// counts once; a paragraph or item ends every sentence in it.
func measureProse(text string) proseStats {
	var st proseStats
	for _, para := range paragraphs(text) {
		para = inlineCode.ReplaceAllString(para, "code")
		para = link.ReplaceAllString(para, "$1")
		for _, s := range splitSentences(para) {
			n := len(strings.Fields(s))
			if n < 3 {
				continue
			}
			st.sentences++
			st.words += n
			if n > 40 {
				st.long++
			}
		}
	}
	return st
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
