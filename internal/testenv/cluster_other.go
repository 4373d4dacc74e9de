//go:build !linux && !darwin

package testenv

import (
	"errors"
	"runtime"
)

type cluster struct{}

func startCluster(...string) (*cluster, string, error) {
	return nil, "", errors.New("no throwaway cluster on " + runtime.GOOS)
}

func (*cluster) stop() {}
