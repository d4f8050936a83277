package schedule_test

import (
	"os"
	"testing"

	"github.com/walbox/walbox/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
