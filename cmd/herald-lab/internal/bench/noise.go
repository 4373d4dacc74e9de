package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Noise is what else loaded the machine or the database during the run.
// Benchmarks on a shared machine vary; these say when a figure is suspect.
type Noise struct {
	// LoadAvg1mAtStart is the 1-minute load average when the run began
	// (Linux; -1 when unknown). It includes whatever ran just before,
	// such as a previous benchmark, so it is information, not a verdict.
	LoadAvg1mAtStart float64 `json:"load_avg_1m_at_start"`
	// OtherCPUPct is the share of the machine's CPU capacity used during
	// the run by processes other than this one and PostgreSQL's (Linux,
	// with PostgreSQL on this machine; -1 when unknown).
	OtherCPUPct float64 `json:"other_cpu_pct"`
	// CPUStealPct is the share of CPU time the hypervisor took during the
	// run (Linux; -1 when unknown).
	CPUStealPct float64 `json:"cpu_steal_pct"`
	// OtherPGSessionsMax is the most active sessions of other clients seen
	// on the database server (PostgreSQL, or MySQL with --db mysql://),
	// sampled every second.
	OtherPGSessionsMax int `json:"other_active_pg_sessions_max"`
	// Suspect is true when any of the above suggests the figures are low.
	Suspect bool `json:"suspect"`
}

type noiseSampler struct {
	e         *env
	startStat []uint64
	startSelf uint64
	noise     Noise
	pg        *procTicks // CPU of PostgreSQL's processes
	mu        sync.Mutex
	cancel    context.CancelFunc
	done      chan struct{}
}

func startNoise(ctx context.Context, e *env) *noiseSampler {
	s := &noiseSampler{e: e, done: make(chan struct{})}
	s.noise.LoadAvg1mAtStart = loadAvg()
	s.startStat = cpuStat()
	s.startSelf, _ = selfTicks()
	s.pg = newProcTicks(e.serverCommands()...)
	e.beforePoolClose = func() {
		s.mu.Lock()
		s.pg.sample()
		s.mu.Unlock()
	}
	ctx, s.cancel = context.WithCancel(ctx)
	go func() {
		defer close(s.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			n, err := e.otherActiveSessions(ctx)
			s.mu.Lock()
			if err == nil {
				s.noise.OtherPGSessionsMax = max(s.noise.OtherPGSessionsMax, n)
			}
			s.pg.sample()
			s.mu.Unlock()
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return s
}

// stop ends sampling and returns what was seen.
func (s *noiseSampler) stop() Noise {
	s.cancel()
	<-s.done
	s.e.beforePoolClose = nil
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pg.sample()
	n := s.noise
	n.CPUStealPct, n.OtherCPUPct = -1, -1
	end := cpuStat()
	endSelf, selfOK := selfTicks()
	if len(s.startStat) == 8 && len(end) == 8 {
		var total, idle uint64
		for i := range 8 {
			total += end[i] - s.startStat[i]
		}
		idle = end[3] - s.startStat[3] + end[4] - s.startStat[4] // idle, iowait
		steal := end[7] - s.startStat[7]
		if total > 0 {
			n.CPUStealPct = round(100*float64(steal)/float64(total), 1)
			if selfOK && s.pg.ok && s.pg.total > 0 {
				busy := float64(total - idle - steal)
				other := busy - float64(endSelf-s.startSelf) - float64(s.pg.total)
				n.OtherCPUPct = round(max(0, 100*other/float64(total)), 1)
			}
		}
	}
	n.Suspect = n.OtherPGSessionsMax > 0 || n.CPUStealPct > 5 || n.OtherCPUPct > 10
	return n
}

// cpuMeter measures the CPU time PostgreSQL's processes and this process
// spend during one drain: what each event costs the database, whichever
// system drains. With --cpuprofile it also profiles this process over the
// drain, into profile.
type cpuMeter struct {
	pg      *procTicks
	self    uint64
	selfOK  bool
	profile *os.File
}

func startCPU(e *env, label string) *cpuMeter {
	m := &cpuMeter{pg: newProcTicks(e.serverCommands()...)}
	m.self, m.selfOK = selfTicks()
	if e.o.cpuProfile != "" {
		e.profiles++
		name := filepath.Join(e.o.cpuProfile, fmt.Sprintf("%s-%d.pprof", label, e.profiles))
		f, err := os.Create(name)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			e.log.Error("not profiling the drain", "file", name, "error", err)
			if f != nil {
				_ = f.Close()
			}
		} else {
			m.profile = f
		}
	}
	return m
}

// stop reads the CPU time since start, in microseconds per event: nil
// where unknown. Call it while the drain's pool is still open, so that its
// server processes are still there to read.
func (m *cpuMeter) stop(events int64) (db, self *float64) {
	if m.profile != nil {
		pprof.StopCPUProfile()
		_ = m.profile.Close()
		m.profile = nil
	}
	if events <= 0 {
		return nil, nil
	}
	perEvent := func(ticks uint64) *float64 {
		us := round(float64(ticks)*1e6/clockTicks/float64(events), 1)
		return &us
	}
	if m.pg.sample(); m.pg.ok && len(m.pg.last) > 0 { // PostgreSQL runs here
		db = perEvent(m.pg.total)
	}
	if end, ok := selfTicks(); ok && m.selfOK && end >= m.self {
		self = perEvent(end - m.self)
	}
	return db, self
}

// otherActiveSessions counts the database server's sessions running a
// statement for clients other than this run.
func (e *env) otherActiveSessions(ctx context.Context) (int, error) {
	if e.my != nil {
		return e.my.otherActiveSessions(ctx, e)
	}
	var n int
	err := e.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE state = 'active' AND backend_type = 'client backend'
		  AND pid <> pg_backend_pid() AND application_name <> 'herald-bench'`).Scan(&n)
	return n, err
}

// serverCommands are the names (comm) of the database server's processes.
func (e *env) serverCommands() []string {
	if e.my != nil {
		return []string{"mariadbd", "mysqld"}
	}
	return []string{"postgres"}
}

// databaseName names the database server in what the bench prints.
func (e *env) databaseName() string {
	if e.my != nil {
		return "MySQL"
	}
	return "PostgreSQL"
}

// procTicks sums the CPU time of the processes of some names (comm) from
// when it was created: each process's ticks since it was first seen, or
// since it started when it started later.
type procTicks struct {
	comms []string
	start float64 // seconds since boot when sampling began
	last  map[int]uint64
	total uint64
	ok    bool
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on Linux.
const clockTicks = 100

func newProcTicks(comms ...string) *procTicks {
	p := &procTicks{comms: comms, start: uptime(), last: map[int]uint64{}}
	p.ok = p.start > 0
	p.scan(true)
	return p
}

func (p *procTicks) sample() {
	if p.ok {
		p.scan(false)
	}
}

func (p *procTicks) scan(first bool) {
	dir, err := os.ReadDir("/proc")
	if err != nil {
		p.ok = false
		return
	}
	for _, d := range dir {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, ticks, started, ok := procStat("/proc/" + d.Name() + "/stat")
		if !ok || !slices.Contains(p.comms, comm) {
			continue
		}
		prev, seen := p.last[pid]
		switch {
		case seen:
			if ticks > prev {
				p.total += ticks - prev
			}
		case first || float64(started)/clockTicks < p.start:
			// Running before the benchmark: count from now on.
		default:
			p.total += ticks
		}
		p.last[pid] = ticks
	}
}

// procStat reads a /proc/<pid>/stat file: the command name, utime+stime
// and the start time, both in clock ticks.
func procStat(path string) (comm string, ticks, started uint64, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0, 0, false
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return "", 0, 0, false
	}
	f := strings.Fields(s[closing+1:]) // f[0] is field 3, the state
	if len(f) < 20 {
		return "", 0, 0, false
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return "", 0, 0, false
	}
	return s[open+1 : closing], utime + stime, start, true
}

func selfTicks() (uint64, bool) {
	_, t, _, ok := procStat("/proc/self/stat")
	return t, ok
}

// uptime returns the seconds since boot, or -1.
func uptime() float64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// loadAvg returns the 1-minute load average, or -1.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// cpuStat returns the aggregate CPU counters of /proc/stat (user, nice,
// system, idle, iowait, irq, softirq, steal), or nil.
func cpuStat() []uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return nil
	}
	out := make([]uint64, 8)
	for i := range out {
		v, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return nil
		}
		out[i] = v
	}
	return out
}
