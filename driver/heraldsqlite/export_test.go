package heraldsqlite

// FileDSN exposes the data source name Open builds, for the fuzz tests.
var FileDSN = fileDSN

// DSNParams exposes the parameters every connection gets.
var DSNParams = dsnParams
