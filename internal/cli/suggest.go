package cli

import "fmt"

// nearest returns the candidate closest to word by edit distance. It returns "" when none is
// close enough to be a likely typo. That is at most a third of the word's length, and at least 1.
func nearest(word string, candidates []string) string {
	best, bestDist := "", max(len(word)/3, 1)+1
	for _, c := range candidates {
		if d := editDistance(word, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, counting an adjacent swap as one edit.
func editDistance(a, b string) int {
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// didYouMean returns "; did you mean X?" for the candidate nearest to word, X written with
// format. It returns "" when none is near.
func didYouMean(word string, candidates []string, format string) string {
	if n := nearest(word, candidates); n != "" {
		return "; did you mean " + fmt.Sprintf(format, n) + "?"
	}
	return ""
}
