package templates

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// StaleBuild is how long a version may stay building before GC takes it
// for a build whose server went away, and fails it.
const StaleBuild = 24 * time.Hour

// GCResult counts what GC removed.
type GCResult struct {
	Superseded int // ready versions newer ones replaced, unused
	Stale      int // builds left building past StaleBuild, failed
	Files      int // image files and staging folders without a live version
}

// GC collects template storage: ready versions a newer ready version of
// the same template superseded and no sandbox that has not ended runs
// (their rows marked deleted, their images removed), builds left building
// past StaleBuild (failed), and files under the registry's folder that no
// live version owns (a crash between a file and its row, failed builds'
// leftovers). It is safe to run while builds go on.
func (s *Service) GC(ctx context.Context) (GCResult, error) {
	var res GCResult
	var errs []error
	// Stale builds first: their files are then leftovers.
	var stale []Version
	if err := s.db.WithContext(ctx).Where("state = ? AND created_at < ?", StateBuilding, s.now().Add(-StaleBuild)).Find(&stale).Error; err != nil {
		return res, fmt.Errorf("template gc: %w", err)
	}
	for _, v := range stale {
		if err := s.Fail(ctx, v.TenantID, v.ID, errors.New("the build did not finish (the server that ran it went away)")); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Stale++
	}
	// Superseded and unused.
	var ready []Version
	if err := s.db.WithContext(ctx).Where("state = ? AND deleted_at IS NULL", StateReady).Order("template_id, seq DESC").Find(&ready).Error; err != nil {
		return res, fmt.Errorf("template gc: %w", err)
	}
	for i, v := range ready {
		if i == 0 || ready[i-1].TemplateID != v.TemplateID {
			continue // the newest ready version of its template
		}
		n, err := inUse(s.db.WithContext(ctx), v.TenantID, []string{v.ID})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n > 0 {
			continue
		}
		r := s.db.WithContext(ctx).Model(&Version{}).Where("id = ? AND deleted_at IS NULL", v.ID).Update("deleted_at", s.now())
		if r.Error != nil {
			errs = append(errs, r.Error)
			continue
		}
		if r.RowsAffected == 1 {
			s.removeFile(v)
			res.Superseded++
		}
	}
	n, err := s.sweepFiles(ctx)
	res.Files = n
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("template gc: %w", err)
	}
	return res, nil
}

// sweepFiles removes image files and staging folders that no live version
// (building, or ready and not deleted) owns.
func (s *Service) sweepFiles(ctx context.Context) (int, error) {
	var live []string
	if err := s.db.WithContext(ctx).Model(&Version{}).Where("deleted_at IS NULL AND state IN ?", []State{StateBuilding, StateReady}).
		Pluck("id", &live).Error; err != nil {
		return 0, err
	}
	keep := map[string]bool{}
	for _, id := range live {
		keep[id] = true
	}
	n := 0
	var errs []error
	tenantsDirs, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, err
	}
	for _, td := range tenantsDirs {
		if !td.IsDir() {
			continue
		}
		if td.Name() == ".staging" {
			stagingTenants, _ := os.ReadDir(filepath.Join(s.dir, ".staging"))
			for _, st := range stagingTenants {
				builds, _ := os.ReadDir(filepath.Join(s.dir, ".staging", st.Name()))
				for _, b := range builds {
					if !keep[b.Name()] {
						if err := os.RemoveAll(filepath.Join(s.dir, ".staging", st.Name(), b.Name())); err != nil {
							errs = append(errs, err)
							continue
						}
						n++
					}
				}
			}
			continue
		}
		files, _ := os.ReadDir(filepath.Join(s.dir, td.Name()))
		for _, f := range files {
			id, ok := strings.CutSuffix(f.Name(), ".ext4")
			if ok && keep[id] {
				continue
			}
			if err := os.Remove(filepath.Join(s.dir, td.Name(), f.Name())); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}
