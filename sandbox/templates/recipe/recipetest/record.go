// Package recipetest records recipe builds for tests that need one without
// running it (route tables, isolation).
package recipetest

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox/templates/recipe"
)

// Record writes a succeeded build of tenant's template name, as a finished
// build leaves it (no log file: its log reads empty).
func Record(t testing.TB, db *gorm.DB, tenant, name, by string) recipe.Build {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	b := recipe.Build{ID: uuid.Must(uuid.NewV7()).String(), TenantID: tenant, TemplateName: name,
		VersionID: uuid.Must(uuid.NewV7()).String(), RecipeDigest: "sha256:" + uuid.NewString(),
		Recipe: "apiVersion: stockade.dev/template/v1\nname: " + name + "\nbase: debian\n", State: recipe.StateSucceeded,
		Step: recipe.StepPack, CreatedBy: by, StartedAt: now, EndedAt: &now}
	if err := db.Create(&b).Error; err != nil {
		t.Fatalf("record build of %s: %v", name, err)
	}
	return b
}
