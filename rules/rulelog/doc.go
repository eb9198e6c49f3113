// Package rulelog logs what the rule engine's results mean for operators
// without flooding the log: the rejections shadow rules would have made
// (Shadow), and the requests no rule applied to, which pass unlimited
// (Unmatched), at most one record per interval with the count it stands
// for. The front ends (package rls, package rules/httprules and the
// server) write through them.
package rulelog
