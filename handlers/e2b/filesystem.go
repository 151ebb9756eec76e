package e2b

import (
	"context"
	"errors"
	"io"
	"path"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stockade-dev/stockade/handlers/e2b/proto/filesystem"
	"github.com/stockade-dev/stockade/handlers/e2b/proto/filesystem/filesystemconnect"
	"github.com/stockade-dev/stockade/sandbox"
)

// filesystemService is envd's filesystem.Filesystem over sandbox.Service's
// file API, the Python sync SDK's polling watchers (CreateWatcher,
// GetWatcherEvents, RemoveWatcher) included (watchers.go).
type filesystemService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	s *Server
}

var entryTypes = map[string]filesystem.FileType{
	sandbox.EntryFile: filesystem.FileType_FILE_TYPE_FILE, sandbox.EntryDir: filesystem.FileType_FILE_TYPE_DIRECTORY,
	sandbox.EntrySymlink: filesystem.FileType_FILE_TYPE_SYMLINK,
}

func entryInfo(e sandbox.Entry) *filesystem.EntryInfo {
	out := &filesystem.EntryInfo{Name: e.Name, Type: entryTypes[e.Type], Path: outPath(e.Path), Size: e.Size, Mode: e.Mode,
		Permissions: e.Permissions, Owner: e.Owner, Group: e.Group, ModifiedTime: timestamppb.New(e.Modified)}
	if e.Type == sandbox.EntrySymlink {
		t := e.SymlinkTarget
		out.SymlinkTarget = &t
	}
	return out
}

func (f *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	b := bindingOf(ctx)
	e, err := f.s.sbx.Stat(ctx, b.tenantID, b.sandboxID, inPath(req.Msg.GetPath()))
	if err != nil {
		return nil, rpcErr(err)
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: entryInfo(e)}), nil
}

func (f *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	b := bindingOf(ctx)
	e, created, err := f.s.sbx.MakeDir(ctx, b.actor, b.tenantID, b.sandboxID, inPath(req.Msg.GetPath()), 0)
	if err != nil {
		return nil, rpcErr(err)
	}
	if !created {
		return nil, connect.NewError(connect.CodeAlreadyExists, errors.New("directory "+req.Msg.GetPath()+" already exists"))
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: entryInfo(e)}), nil
}

func (f *filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	b := bindingOf(ctx)
	e, err := f.s.sbx.Move(ctx, b.actor, b.tenantID, b.sandboxID, inPath(req.Msg.GetSource()), inPath(req.Msg.GetDestination()))
	if err != nil {
		return nil, rpcErr(err)
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: entryInfo(e)}), nil
}

func (f *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	b := bindingOf(ctx)
	depth := int(min(max(req.Msg.GetDepth(), 1), uint32(sandbox.MaxListDepth)))
	l, err := f.s.sbx.ListDir(ctx, b.tenantID, b.sandboxID, inPath(req.Msg.GetPath()), depth)
	if err != nil {
		return nil, rpcErr(err)
	}
	out := &filesystem.ListDirResponse{}
	for _, e := range l.Entries {
		out.Entries = append(out.Entries, entryInfo(e))
	}
	return connect.NewResponse(out), nil
}

func (f *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	b := bindingOf(ctx)
	if err := f.s.sbx.Remove(ctx, b.actor, b.tenantID, b.sandboxID, inPath(req.Msg.GetPath()), true); err != nil {
		return nil, rpcErr(err)
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// uploadTempPrefix names the temporary file a write fills before it
// renames it into place (sandbox/agent): not shown to E2B watchers.
const uploadTempPrefix = ".stockade-upload-"

var eventTypes = map[string]filesystem.EventType{
	"create": filesystem.EventType_EVENT_TYPE_CREATE, "write": filesystem.EventType_EVENT_TYPE_WRITE,
	"remove": filesystem.EventType_EVENT_TYPE_REMOVE, "rename": filesystem.EventType_EVENT_TYPE_RENAME,
	"chmod": filesystem.EventType_EVENT_TYPE_CHMOD,
}

func (f *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], st *connect.ServerStream[filesystem.WatchDirResponse]) error {
	b := bindingOf(ctx)
	if req.Msg.GetIncludeEntry() || req.Msg.GetAllowNetworkMounts() {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("includeEntry and allowNetworkMounts are not supported"))
	}
	w, err := f.s.sbx.Watch(ctx, b.tenantID, b.sandboxID, inPath(req.Msg.GetPath()), req.Msg.GetRecursive())
	if err != nil {
		return rpcErr(err)
	}
	defer w.Close()
	if err := st.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	for {
		evs, err := w.Next()
		if errors.Is(err, io.EOF) || ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return rpcErr(err)
		}
		for _, ev := range evs {
			t, ok := eventTypes[ev.Type]
			if !ok || strings.HasPrefix(path.Base(ev.Name), uploadTempPrefix) {
				continue // overflow (E2B has no such event), or a write's temporary file
			}
			fe := &filesystem.FilesystemEvent{Name: strings.TrimPrefix(ev.Name, "/"), Type: t}
			if err := st.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: fe}}); err != nil {
				return err
			}
		}
	}
}
